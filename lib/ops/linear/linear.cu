// Fused linear: bias and activation ride in the cuBLASLt epilogue instead of separate passes.
// Forward writes y once (and, for GELU, the pre-activation as aux). Backward, with an
// activation: one pass (bias_act's backward kernel) turns dy into dpre and sums db down its
// columns, then two plain products dx = dpre·W and dW = dpreᵀ·x. Without one: the two products,
// dW's BGRADB epilogue reducing db. Replaces the twin matmul + add + activation (3 launches
// forward, about 7 backward).
// cuBLASLt's DGELU_BGRAD epilogue is not used: it would fold the GELU's derivative into the next
// product but runs as a separate kernel slower than our activation pass and BGRADB together
// (docs/history/performance-log.md).
#include "lib/cuda/cublaslt.h"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/bias_act/bias_act_cuda.h"
#include "lib/ops/linear/linear_cuda.h"
#include "lib/ops/reduce/reduce_cuda.h"

namespace ft::cuda {

namespace {

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
                     const Tensor& dx, const GradOutput& dweight, const GradOutput& dbias) {
  const int64_t n = x.size(0), in = x.size(1), out = weight.size(0);
  Tensor dpre = dy;
  if (act != Activation::None) {
    // act'(saved) is act'(pre) for GELU (saved = pre) and for ReLU (saved = y > 0 where pre > 0).
    dpre = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
    bias_act_backward(dy, saved, Tensor(), act, dpre, dbias);
  }
  if (dx.defined()) {  // dxᵀ[in, n] = W_cm[in, out] · dpre_cm[out, n]
    LtGemm g;
    g.dtype = dy.dtype();
    g.m = in;
    g.n = n;
    g.k = out;
    g.a = weight.data_ptr();
    g.lda = in;
    g.b = dpre.data_ptr();
    g.ldb = out;
    g.d = dx.data_ptr();
    g.ldd = in;
    run_gemm(g);
  }
  if (dweight.defined()) {  // dWᵀ[in, out] = x_cm[in, n] · dpre_cmᵀ[n, out]
    LtGemm g;
    g.dtype = dy.dtype();
    // Into an f32 gradient view: cuBLASLt sums in f32 and writes (or, beta = 1, adds) f32.
    g.out_dtype = dweight.tensor.dtype();
    g.accumulate = dweight.accumulate;
    g.m = in;
    g.n = out;
    g.k = n;
    g.a = x.data_ptr();
    g.lda = in;
    g.b = dpre.data_ptr();
    g.ldb = out;
    g.trans_b = true;
    g.d = dweight.tensor.data_ptr();
    g.ldd = in;
    // BGRADB (db = Σ over n of dy, in D's dtype) overwrites: it serves a db that is written, the
    // column kernel one that is added to, or one cuBLASLt has no such algorithm for.
    bool bias_done = false;
    if (dbias.defined() && act == Activation::None && !dbias.accumulate &&
        dbias.tensor.dtype() == g.d_dtype()) {
      LtGemm with_bias = g;
      with_bias.epilogue = CUBLASLT_EPILOGUE_BGRADB;
      with_bias.bias = dbias.tensor.data_ptr();
      bias_done = try_run_gemm(with_bias);
    }
    if (!bias_done) {
      run_gemm(g);
      if (dbias.defined() && act == Activation::None) column_sums(dy, n, out, dbias);
    }
  } else if (dbias.defined() && act == Activation::None) {
    column_sums(dy, n, out, dbias);
  }
}

}  // namespace ft::cuda
