// linear's fused paths (CUDA builds only): the cuBLASLt epilogue forms and the narrow forward,
// with their backward recorded beside them; and the epilogue backward that takes a consumer's
// bias sums (linear_backward_with_handoff). linear.cpp dispatches here.
#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/linear/linear_cuda.h"
#include "lib/ops/matmul/matmul.h"

namespace ft::cuda {

// `narrow`: the narrow forward (few outputs, no activation), whose backward is dx by the matmul
// primitive and dW, db by the narrow kernel straight into their views, because cuBLASLt's dW
// product into an f32 view falls back to a slow generic kernel at so few outputs. Otherwise the
// cuBLASLt epilogue path both ways.
Tensor linear_fused(const Tensor& x, const Tensor& w, const Tensor& b, Activation act, bool narrow) {
  const int64_t in = w.size(1), out_features = w.size(0);
  Tensor x2 = x.detach().reshape({-1, in});
  const int64_t n = x2.size(0);
  Tensor y = Tensor::empty({n, out_features}, x.dtype(), x.device());
  Tensor pre = act == Activation::GELU ? Tensor::empty({n, out_features}, x.dtype(), x.device()) : Tensor();
  if (narrow) narrow_linear_forward(x2, w, b, y);
  else linear_forward(x2, w, b, act, y, pre);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor result = y.reshape(out_shape);
  if (!needs_grad({&x, &w, &b})) return result;
  Tensor saved = act == Activation::GELU ? pre : act == Activation::ReLU ? y : Tensor();
  const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.requires_grad();
  return record("linear", result, {x, w, b},
                [x2, w = w.detach(), saved, act, narrow, gx, gw, gb, x_shape = x.shape()](const Tensor& g) {
                  Tensor dy = g.reshape({x2.size(0), w.size(0)});
                  // Straight into the parameters' f32 gradient views when they have them.
                  const GradOutput dw = grad_output(1, gw, w.shape(), w.dtype(), w.device());
                  const GradOutput db = grad_output(2, gb, {w.size(0)}, w.dtype(), w.device());
                  if (narrow) {
                    // dW and db in one pass over x, straight into their views (no accumulate
                    // kernels after); dx is the matmul primitive's.
                    narrow_linear_backward_params(dy, x2, dw, db);
                    return std::vector<Tensor>{gx ? ft::matmul(dy, w).reshape(x_shape) : Tensor(), dw.tensor, db.tensor};
                  }
                  Tensor dx = gx ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
                  linear_backward(dy, x2, w, act, saved, dx, dw, db);
                  return std::vector<Tensor>{gx ? dx.reshape(x_shape) : Tensor(), dw.tensor, db.tensor};
                });
}


std::vector<Tensor> linear_backward_with_handoff(const Tensor& g, const Tensor& x2, const Tensor& w,
                                                 BiasGradHandoff& handoff, bool want_x, bool want_w, bool want_b,
                                                 const Shape& x_shape) {
  const Tensor dy = g.reshape({x2.size(0), w.size(0)});
  const GradOutput dw = grad_output(1, want_w, w.shape(), w.dtype(), w.device());
  const bool identical = g.impl() == handoff.grad.impl();
  // A claimed view was written on the promise that g would be that gradient (completes_input_gradient).
  FT_CHECK(!handoff.written.defined() || identical, "linear backward: the bias gradient view was written from a "
           "gradient that later contributions changed");
  const bool summed = want_b && (handoff.sums.defined() || handoff.written.defined()) && identical;
  const Tensor sums = summed ? handoff.sums : Tensor(), written = summed ? handoff.written : Tensor();
  const Tensor bias = handoff.bias;  // kept for a backward of a retained graph
  handoff = BiasGradHandoff{};
  handoff.bias = bias;
  const GradOutput db = want_b && !summed ? grad_output(2, true, {w.size(0)}, w.dtype(), w.device()) : GradOutput();
  Tensor dx = want_x ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
  linear_backward(dy, x2, w, Activation::None, Tensor(), dx, dw, db);
  // The sums are f32: an f32 gradient view takes them as they are (autograd adds them in, one
  // small kernel), anything else in b's dtype.
  const Tensor dbias = !want_b                         ? Tensor()
                       : !summed                       ? db.tensor
                       : written.defined()             ? written
                       : grad_target(2).view.defined() ? sums
                                                       : sums.to(w.dtype());
  return {want_x ? dx.reshape(x_shape) : Tensor(), dw.tensor, dbias};
}

}  // namespace ft::cuda
