#include "lib/ops/linear_norm.h"

#include <memory>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/layer_norm.h"
#include "lib/ops/linear.h"
#include "lib/ops/norm_dispatch.h"

namespace ft {

Tensor linear_layer_norm_act_dropout_composite(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                               const Tensor& norm_weight, const Tensor& norm_bias, Activation act,
                                               double dropout_p, uint64_t seed, const Tensor& offset, double eps) {
  return layer_norm_act_dropout_composite(linear_composite(x, weight, bias, Activation::None), norm_weight, norm_bias,
                                          act, dropout_p, seed, offset, eps);
}

Tensor linear_layer_norm_act_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& norm_weight, const Tensor& norm_bias, Activation act,
                                     double dropout_p, uint64_t seed, const Tensor& offset, double eps) {
  check_linear_inputs(x, weight, bias);
  // The norm's backward sums dx's columns only in its epilogue form (an activation or dropout):
  // without one, the plain norm saves its output instead of its input.
  const bool epilogue = act != Activation::None || dropout_p > 0.0;
  const bool fused = epilogue && linear_takes_epilogue_path(x, weight, bias, Activation::None) &&
                     cuda::norm_supported(weight.size(0));
  if (!fused)  // each op on its own: the twins, or each fused where it can be
    return layer_norm_act_dropout(linear(x, weight, bias), norm_weight, norm_bias, act, dropout_p, seed, offset, eps);
  const int64_t in = weight.size(1), out = weight.size(0);
  const Tensor x2 = x.detach().reshape({-1, in});
  const int64_t rows = x2.size(0);
  const Tensor y = Tensor::empty({rows, out}, x.dtype(), x.device());
  check_norm_epilogue_inputs("linear_layer_norm_act_dropout", y, norm_weight, norm_bias, dropout_p, offset);
  cuda::linear_forward(x2, weight, bias, Activation::None, y, Tensor());
  const bool training = needs_grad({&x, &weight, &bias, &norm_weight, &norm_bias});
  const NormFusedForward norm = norm_fused_forward(
      NormKind::Layer, y, Tensor(), norm_weight, norm_bias, eps,
      NormEpilogue{.act = act, .dropout_p = dropout_p, .seed = seed, .offset = offset, .mask = Tensor()}, training);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  const Tensor result = norm.result.out.reshape(out_shape);
  if (!training) return result;
  const bool want_x = x.requires_grad(), want_w = weight.requires_grad(), want_b = bias.requires_grad(),
             want_nw = norm_weight.requires_grad(), want_nb = norm_bias.requires_grad();
  return record("linear_layer_norm_act_dropout", result, {x, weight, bias, norm_weight, norm_bias},
                [x2, y, w = weight.detach(), nw = norm_weight.detach(), nb = norm_bias.detach(), mean = norm.mean,
                 rstd = norm.rstd, epilogue = norm.epilogue, want_x, want_w, want_b, want_nw, want_nb,
                 x_shape = x.shape()](const Tensor& g) {
                  const Tensor dy = g.reshape(y.shape());
                  // Straight into the parameters' f32 gradient views when they have them.
                  const GradOutput dw = grad_output(1, want_w, w.shape(), w.dtype(), w.device());
                  const GradOutput db = grad_output(2, want_b, {w.size(0)}, w.dtype(), w.device());
                  const GradOutput dnw = grad_output(3, want_nw, nw.shape(), nw.dtype(), nw.device());
                  const GradOutput dnb = grad_output(4, want_nb, nb.shape(), nb.dtype(), nb.device());
                  // The norm's dx is the linear's output gradient; its column sums are db.
                  const Tensor dpre = Tensor::empty(y.shape(), y.dtype(), y.device());
                  cuda::norm_backward(NormKind::Layer, dy, y, nw, mean, rstd, dpre, dnw, dnb, epilogue, nb, Tensor(),
                                      db);
                  Tensor dx = want_x ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
                  cuda::linear_backward(dpre, x2, w, Activation::None, Tensor(), dx, dw, GradOutput());
                  return std::vector<Tensor>{want_x ? dx.reshape(x_shape) : Tensor(), dw.tensor, db.tensor,
                                             dnw.tensor, dnb.tensor};
                });
}

AddNormResult linear_add_layer_norm_composite(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                              const Tensor& residual, const Tensor& norm_weight,
                                              const Tensor& norm_bias, double eps) {
  const Tensor sum = linear_composite(x, weight, bias, Activation::None) + residual;
  return {sum, layer_norm_composite(sum, norm_weight, norm_bias, eps)};
}

AddNormResult linear_add_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                    const Tensor& norm_weight, const Tensor& norm_bias, double eps) {
  check_linear_inputs(x, weight, bias);
  const bool fused = linear_takes_epilogue_path(x, weight, bias, Activation::None) &&
                     cuda::norm_supported(weight.size(0));
  if (!fused) return add_layer_norm(linear(x, weight, bias), residual, norm_weight, norm_bias, eps);
  const int64_t in = weight.size(1), out = weight.size(0);
  const Tensor x2 = x.detach().reshape({-1, in});
  Shape out_shape = x.shape();
  out_shape.back() = out;
  const Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  check_norm_inputs("linear_add_layer_norm", y, residual, norm_weight, norm_bias, true);
  cuda::linear_forward(x2, weight, bias, Activation::None, y.reshape({-1, out}), Tensor());
  const bool training = needs_grad({&x, &weight, &bias, &residual, &norm_weight, &norm_bias});
  NormFusedForward norm = norm_fused_forward(NormKind::Layer, y, residual, norm_weight, norm_bias, eps, {}, training);
  if (!training) return norm.result;
  // Two nodes, as linear then add_layer_norm record: the sum's (here with the linear's backward
  // in it) and the norm's, which adds the sum's other gradient (the residual stream's) itself
  // and hands the column sums of the dx it writes to the sum's node.
  auto handoff = std::make_shared<BiasGradHandoff>();
  handoff->bias = bias;
  const bool want_x = x.requires_grad(), want_w = weight.requires_grad(), want_b = bias.requires_grad();
  norm.result.sum = record("linear_add", norm.result.sum, {x, weight, bias, residual},
                           [x2, w = weight.detach(), handoff, want_x, want_w, want_b, x_shape = x.shape()](const Tensor& g) {
                             std::vector<Tensor> grads =
                                 linear_backward_with_handoff(g, x2, w, *handoff, want_x, want_w, want_b, x_shape);
                             grads.push_back(g);  // the residual's
                             return grads;
                           });
  norm.result.out =
      record_fused_norm(norm, NormKind::Layer, norm.result.sum, norm_weight, norm_bias, want_b ? handoff : nullptr);
  return norm.result;
}

}  // namespace ft
