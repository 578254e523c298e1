// The norms' fused path (CUDA builds only): one kernel forward (the residual add, the norm and the
// epilogue's activation and dropout), one backward that also adds the input's pending gradient and
// can sum dx's columns for a linear's bias.
#include <memory>
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/norm/norm_cuda.h"

namespace ft::cuda {

NormFusedForward norm_fused_forward(NormKind kind, const Tensor& x, const Tensor& residual, const Tensor& weight,
                                    const Tensor& bias, double eps, const NormEpilogue& requested, bool training) {
  const int64_t rows = x.numel() / x.size(-1);
  NormFusedForward f;
  // Training with dropout: the forward keeps the mask's bits for the backward (1 bit an element).
  f.epilogue = requested;
  if (training && f.epilogue.dropout_p > 0.0 && !f.epilogue.mask.defined())
    f.epilogue.mask = Tensor::empty({(x.numel() + 7) / 8}, DType::U8, x.device());
  f.result.out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (residual.defined()) f.result.sum = Tensor::empty(x.shape(), x.dtype(), x.device());
  // Only the epilogue's backward reads the mean: the plain forms take x̂ from their output.
  if (kind == NormKind::Layer && training && f.epilogue.active()) f.mean = Tensor::empty({rows}, DType::F32, x.device());
  f.rstd = Tensor::empty({rows}, DType::F32, x.device());
  if (!norm_forward(kind, x, residual, weight, bias, eps, f.result.sum, f.result.out, f.mean, f.rstd, f.epilogue))
    f.epilogue.mask = Tensor();  // not written: the backward draws the mask again
  return f;
}

Tensor record_fused_norm(const NormFusedForward& forward, NormKind kind, const Tensor& input, const Tensor& weight,
                         const Tensor& bias, const std::shared_ptr<BiasGradHandoff>& dx_sums) {
  const NormEpilogue& epilogue = forward.epilogue;
  const Tensor &mean = forward.mean, &rstd = forward.rstd;
  const bool want_w = weight.requires_grad(), want_b = bias.defined() && bias.requires_grad();
  const char* name = epilogue.active() ? "layer_norm_act_dropout" : kind == NormKind::Layer ? "layer_norm" : "rms_norm";
  // The plain forms save their output, not their input: the next op (a linear) keeps the output
  // anyway, and the input (the residual sum, in a transformer) can then die after the forward,
  // one [.., C] tensor per norm less at the forward's peak. x̂ = (y − b)/w in backward, which
  // a zero weight element makes unrecoverable (layer_norm.h). The epilogue's output is not y,
  // so that form saves its input and the mean.
  const Tensor saved = epilogue.active() ? input.detach() : forward.result.out.detach();
  const Tensor saved_bias = bias.defined() ? bias.detach() : Tensor();
  // The input's gradient from its other uses (the residual stream's, in a transformer) is added
  // in the backward kernel: an add kernel would move three tensors where the kernel reads one more.
  return record_adding(name, forward.result.out, {input, weight, bias},
                       [kind, saved, sw = weight.detach(), sb = saved_bias, mean, rstd, want_w, want_b, epilogue,
                        dx_sums](const Tensor& g, const Tensor& pending) {
                         Tensor dx = Tensor::empty(saved.shape(), saved.dtype(), saved.device());
                         const GradOutput dw = grad_output(1, want_w, sw.shape(), sw.dtype(), sw.device());
                         const GradOutput db = grad_output(2, want_b, sw.shape(), sw.dtype(), sw.device());
                         const bool fits = pending.defined() && pending.dtype() == saved.dtype();
                         // Summed only where this dx is the whole gradient of the input (nothing
                         // left to add outside the kernel).
                         const bool sum_dx = dx_sums && (!pending.defined() || fits);
                         const GradOutput sums =
                             sum_dx ? bias_sums_target(*dx_sums, saved.size(-1), saved.device()) : GradOutput();
                         norm_backward(kind, g, saved, sw, mean, rstd, dx, dw, db, epilogue, sb,
                                       fits ? pending : Tensor(), sums);
                         if (pending.defined() && !fits) dx = ft::add(dx, pending.to(saved.dtype()));
                         if (sum_dx) dx_sums->grad = dx;
                         return std::vector<Tensor>{dx, dw.tensor, db.tensor};
                       });
}

AddNormResult norm_fused(NormKind kind, const Tensor& x, const Tensor& residual, const Tensor& weight,
                         const Tensor& bias, double eps, const NormEpilogue& requested) {
  const bool training = needs_grad({&x, &residual, &weight, &bias});
  NormFusedForward forward = norm_fused_forward(kind, x, residual, weight, bias, eps, requested, training);
  if (!training) return forward.result;
  // The sum is an add node (its gradient reaches x and residual unchanged); the norm reads the
  // sum, so gradients from both outputs meet there.
  Tensor normalized_input = x;
  if (residual.defined()) {
    forward.result.sum =
        record("add", forward.result.sum, {x, residual}, [](const Tensor& g) { return std::vector<Tensor>{g, g}; });
    normalized_input = forward.result.sum;
  }
  forward.result.out = record_fused_norm(forward, kind, normalized_input, weight, bias);
  return forward.result;
}

}  // namespace ft::cuda
