// The fused paths of linear_layer_norm_act_dropout and linear_add_layer_norm (CUDA builds only): the
// product on linear's epilogue path, then the norm's kernels, whose backward sums the columns of
// the dx it writes into the linear's bias gradient.
#include <memory>
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/linear/linear_cuda.h"
#include "lib/ops/linear_norm/linear_norm_cuda.h"
#include "lib/ops/norm/norm_cuda.h"
#include "lib/ops/norm/norm_dispatch.h"

namespace ft::cuda {

Tensor linear_layer_norm_act_dropout_fused(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                           const Tensor& norm_weight, const Tensor& norm_bias, Activation act,
                                           double dropout_p, uint64_t seed, const Tensor& offset, double eps) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const Tensor x2 = x.detach().reshape({-1, in});
  const int64_t rows = x2.size(0);
  const Tensor y = Tensor::empty({rows, out}, x.dtype(), x.device());
  check_norm_epilogue_inputs("linear_layer_norm_act_dropout", y, norm_weight, norm_bias, dropout_p, offset);
  linear_forward(x2, weight, bias, Activation::None, y, Tensor());
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
                  norm_backward(NormKind::Layer, dy, y, nw, mean, rstd, dpre, dnw, dnb, epilogue, nb, Tensor(), db);
                  Tensor dx = want_x ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
                  linear_backward(dpre, x2, w, Activation::None, Tensor(), dx, dw, GradOutput());
                  return std::vector<Tensor>{want_x ? dx.reshape(x_shape) : Tensor(), dw.tensor, db.tensor,
                                             dnw.tensor, dnb.tensor};
                });
}

AddNormResult linear_add_layer_norm_fused(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          const Tensor& residual, const Tensor& norm_weight, const Tensor& norm_bias,
                                          double eps) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const Tensor x2 = x.detach().reshape({-1, in});
  Shape out_shape = x.shape();
  out_shape.back() = out;
  const Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  check_norm_inputs("linear_add_layer_norm", y, residual, norm_weight, norm_bias, true);
  linear_forward(x2, weight, bias, Activation::None, y.reshape({-1, out}), Tensor());
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

}  // namespace ft::cuda
