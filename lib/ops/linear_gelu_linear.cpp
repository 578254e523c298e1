#include "lib/ops/linear_gelu_linear.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/linear.h"

namespace ft {

namespace {

Tensor fused(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  const int64_t in = w1.size(1), hidden = w1.size(0), out = w2.size(0);
  const Tensor x2 = x.detach().reshape({-1, in});
  const int64_t n = x2.size(0);
  const Tensor h = Tensor::empty({n, hidden}, x.dtype(), x.device());
  const Tensor pre = Tensor::empty({n, hidden}, x.dtype(), x.device());
  cuda::linear_forward(x2, w1, b1, Activation::GELU, h, pre);
  const Tensor y = Tensor::empty({n, out}, x.dtype(), x.device());
  cuda::linear_forward(h, w2, b2, Activation::None, y, Tensor());
  Shape out_shape = x.shape();
  out_shape.back() = out;
  const Tensor result = y.reshape(out_shape);
  if (!needs_grad({&x, &w1, &b1, &w2, &b2})) return result;
  const bool gx = x.requires_grad(), gw1 = w1.requires_grad(), gb1 = b1.requires_grad(), gw2 = w2.requires_grad(),
             gb2 = b2.requires_grad();
  return record("linear_gelu_linear", result, {x, w1, b1, w2, b2},
                [x2, h, pre, w1 = w1.detach(), w2 = w2.detach(), gx, gw1, gb1, gw2, gb2,
                 x_shape = x.shape()](const Tensor& g) {
                  const int64_t rows = x2.size(0), hidden_features = w1.size(0);
                  auto empty = [&](const Shape& shape, bool wanted) {
                    return wanted ? Tensor::empty(shape, x2.dtype(), x2.device()) : Tensor();
                  };
                  const Tensor dy = g.reshape({rows, w2.size(0)});
                  const Tensor dw2 = empty(w2.shape(), gw2), db2 = empty({w2.size(0)}, gb2);
                  cuda::linear_backward(dy, h, w2, Activation::None, Tensor(), Tensor(), dw2, db2);
                  const Tensor dx = empty(x2.shape(), gx), dw1 = empty(w1.shape(), gw1),
                               db1 = empty({hidden_features}, gb1);
                  if (gx || gw1 || gb1) {  // everything before the GELU needs dpre
                    const Tensor dpre = Tensor::empty({rows, hidden_features}, x2.dtype(), x2.device());
                    cuda::linear_backward_through_gelu(dy, w2, pre, dpre, db1);
                    cuda::linear_backward(dpre, x2, w1, Activation::None, Tensor(), dx, dw1, Tensor());
                  }
                  return std::vector<Tensor>{gx ? dx.reshape(x_shape) : Tensor(), dw1, db1, dw2, db2};
                });
}

}  // namespace

Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  check_linear(x, w1, b1, "linear_gelu_linear");
  // The second product takes the hidden activations, [..., HIDDEN] like W1's rows.
  check_linear_weight("linear_gelu_linear", w2, b2, w1, "w1", w1.size(0));
  const bool fusable = use_fused(x) && linear_epilogue_supported(x, w1, b1, Activation::GELU) &&
                       linear_epilogue_supported(x, w2, b2, Activation::None);
  if (!fusable) return linear(linear(x, w1, b1, Activation::GELU), w2, b2);
  return fused(x, w1, b1, w2, b2);
}

}  // namespace ft
