// Fused linear: bias and activation ride in the cuBLASLt epilogue instead of separate passes.
// Forward writes y once (and, for GELU, the pre-activation as aux). Backward turns dy into
// dpre in one elementwise pass, then two products: dx = dpre·W, and dW = dpreᵀ·x whose BGRADB
// epilogue also reduces db. Replaces the twin matmul + add + activation (3 launches forward,
// about 7 backward).
#include "lib/cuda/cublaslt.h"
#include "lib/cuda/launchers.h"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/linear.h"
#include "lib/ops/reduce.h"

namespace ft::cuda {

namespace {

template <class T>
__global__ void activation_backward_kernel(const T* dy, const T* saved, T* dpre, int64_t n, Activation act) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float g = to_acc(dy[i]), s = to_acc(saved[i]);
    dpre[i] = from_acc<T>(act == Activation::GELU ? g * gelu_tanh_grad(s, kFastMath<T>) : (s > 0.0f ? g : 0.0f));
  }
}

/// dpre = act'(saved)·dy, one elementwise pass.
void activation_backward(const Tensor& dy, const Tensor& saved, Activation act, const Tensor& dpre) {
  dispatch_floating(dy.dtype(), "linear backward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      activation_backward_kernel<T><<<elementwise_blocks(dy.numel(), kThreads), kThreads, 0, stream()>>>(
          dy.data<T>(), saved.data<T>(), dpre.data<T>(), dy.numel(), act);
    }
  });
  FT_CUDA_CHECK_LAUNCH("activation_backward_kernel");
}

/// dx[N, IN] = dy[N, OUT]·W[OUT, IN] as a column-major product (dxᵀ = W_cm · dy_cm), with the
/// given epilogue.
LtGemm input_gradient_gemm(const Tensor& dy, const Tensor& weight, const Tensor& dx) {
  const int64_t n = dy.size(0), in = weight.size(1), out = weight.size(0);
  LtGemm g;
  g.dtype = dy.dtype();
  g.m = in;
  g.n = n;
  g.k = out;
  g.a = weight.data_ptr();
  g.lda = in;
  g.b = dy.data_ptr();
  g.ldb = out;
  g.d = dx.data_ptr();
  g.ldd = in;
  return g;
}

cublasLtEpilogue_t forward_epilogue(Activation act) {
  switch (act) {
    case Activation::ReLU: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Activation::GELU: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    default: return CUBLASLT_EPILOGUE_BIAS;
  }
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const Tensor& y,
                    const Tensor& pre) {
  const int64_t n = x.size(0), in = x.size(1), out = weight.size(0);
  LtGemm g;
  g.dtype = x.dtype();
  g.m = out;
  g.n = n;
  g.k = in;
  g.a = weight.data_ptr();
  g.lda = in;
  g.trans_a = true;
  g.b = x.data_ptr();
  g.ldb = in;
  g.d = y.data_ptr();
  g.ldd = out;
  g.epilogue = forward_epilogue(act);
  g.bias = bias.data_ptr();
  if (act == Activation::GELU) {
    g.aux = pre.data_ptr();
    g.ld_aux = out;
  }
  run_gemm(g);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, Activation act, const Tensor& saved,
                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const int64_t n = x.size(0), in = x.size(1), out = weight.size(0);
  Tensor dpre = dy;
  if (act != Activation::None) {
    dpre = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
    activation_backward(dy, saved, act, dpre);
  }
  if (dx.defined()) run_gemm(input_gradient_gemm(dpre, weight, dx));
  if (dweight.defined()) {  // dWᵀ[in, out] = x_cm[in, n] · dpre_cmᵀ[n, out]; BGRADB sums op(B) over n
    LtGemm g;
    g.dtype = dy.dtype();
    g.m = in;
    g.n = out;
    g.k = n;
    g.a = x.data_ptr();
    g.lda = in;
    g.b = dpre.data_ptr();
    g.ldb = out;
    g.trans_b = true;
    g.d = dweight.data_ptr();
    g.ldd = in;
    if (dbias.defined()) {
      g.epilogue = CUBLASLT_EPILOGUE_BGRADB;
      g.bias = dbias.data_ptr();
    }
    run_gemm(g);
  } else if (dbias.defined()) {
    dbias.copy_(sum_to(dpre, {out}));
  }
}

void linear_backward_through_gelu(const Tensor& dy, const Tensor& weight, const Tensor& pre, const Tensor& dpre,
                                  const Tensor& dbias_in) {
  LtGemm g = input_gradient_gemm(dy, weight, dpre);
  g.epilogue = dbias_in.defined() ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
  g.aux = pre.data_ptr();
  g.ld_aux = weight.size(1);
  g.bias = dbias_in.defined() ? dbias_in.data_ptr() : nullptr;
  if (try_run_gemm(g)) return;
  // No DGELU epilogue for this configuration: the product, then the GELU gradient and the bias
  // sum as their own passes.
  Tensor dh = Tensor::empty(dpre.shape(), dpre.dtype(), dpre.device());
  run_gemm(input_gradient_gemm(dy, weight, dh));
  activation_backward(dh, pre, Activation::GELU, dpre);
  if (dbias_in.defined()) dbias_in.copy_(sum_to(dpre, {weight.size(1)}));
}

}  // namespace ft::cuda
