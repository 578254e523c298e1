// swiglu_linear's fused path (CUDA builds only): swiglu's kernels around the products, the
// activation made again in backward instead of kept. swiglu_linear.cpp dispatches here.
#include "lib/autograd.h"
#include "lib/ops/bias_act/bias_act_cuda.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/matmul/matmul_cuda.h"
#include "lib/ops/swiglu_linear/swiglu_linear_cuda.h"

namespace ft::cuda {

namespace {
/// h = silu(a)·b as [rows, H], for one product.
Tensor activation_rows(const Tensor& a, const Tensor& b) {
  const int64_t width = a.size(-1), rows = a.numel() / width;
  Tensor h = Tensor::empty({rows, width}, a.dtype(), a.device());
  swiglu_forward(a, b, 0, rows, width, width, h);
  return h;
}
}  // namespace

Tensor swiglu_linear_fused(const Tensor& a, const Tensor& b, const Tensor& weight) {
  const Tensor w = weight.detach();
  const int64_t width = a.size(-1), rows = a.numel() / width, out = w.size(0);
  Shape out_shape = a.shape();
  out_shape.back() = out;
  // A selective recomputation's stash (matmul.h) keeps the product as a linear layer's; its
  // replay takes it back without making h again.
  const Tensor y = MatmulStash::product({rows, out}, [&] {
                     Tensor product = Tensor::empty({rows, out}, a.dtype(), a.device());
                     matmul(activation_rows(a.detach(), b.detach()), w, product, 1, rows, out, width, false, true,
                                false);
                     return product;
                   }).reshape(out_shape);
  if (!needs_grad({&a, &b, &weight})) return y;
  const bool want_inputs = a.requires_grad() || b.requires_grad(), want_weight = weight.requires_grad();
  return record("swiglu_linear", y, {a, b, weight},
                [sa = a.detach(), sb = b.detach(), w, want_inputs, want_weight](const Tensor& g) {
                  const int64_t width = sa.size(-1), rows = sa.numel() / width;
                  const Tensor dy = g.reshape({rows, w.size(0)});
                  Tensor dw;
                  if (want_weight) dw = weight_gradient_product(dy, activation_rows(sa, sb), 2);
                  if (!want_inputs) return std::vector<Tensor>{Tensor(), Tensor(), dw};
                  const Tensor dh = matmul(dy, w);
                  Tensor da = Tensor::empty(sa.shape(), sa.dtype(), sa.device());
                  Tensor db = Tensor::empty(sb.shape(), sb.dtype(), sb.device());
                  swiglu_backward(dh, sa, sb, 0, rows, width, width, da, db);
                  return std::vector<Tensor>{da, db, dw};
                });
}

}  // namespace ft::cuda
