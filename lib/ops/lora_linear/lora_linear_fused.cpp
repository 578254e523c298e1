// lora_linear's fused path (CUDA builds only): the frozen product and the adapter's in one pass of
// cuBLASLt products with the dropout, bias and activation folded in; backward writes the adapters'
// gradients straight into their views.
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/lora_linear/lora_linear_cuda.h"

namespace ft::cuda {

Tensor lora_linear_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                         const Tensor& lora_b, const LoRAOptions& options) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const Tensor x2 = x.detach().reshape({-1, in});
  const Tensor y = Tensor::empty({x2.size(0), out}, x.dtype(), x.device());
  const Tensor w = weight.detach(), a = lora_a.detach(), b = lora_b.detach();
  const Tensor bias_values = bias.defined() ? bias.detach() : Tensor();
  const LoRASaved saved = lora_linear_forward(x2, w, bias_values, a, b, options, y);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  const Tensor result = y.reshape(out_shape);
  if (!needs_grad({&x, &bias, &lora_a, &lora_b})) return result;
  const bool gx = x.requires_grad(), ga = lora_a.requires_grad(), gb = lora_b.requires_grad();
  const bool gbias = bias.defined() && bias.requires_grad();
  return record("lora_linear", result, {x, weight, bias, lora_a, lora_b},
                [x2, w, a, b, options, saved, gx, ga, gb, gbias, x_shape = x.shape()](const Tensor& g) {
                  const Tensor dy = g.reshape({x2.size(0), w.size(0)});
                  const Tensor dx = gx ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
                  // Straight into the adapters' f32 gradient views when they have them.
                  const GradOutput da = grad_output(3, ga, a.shape(), a.dtype(), a.device());
                  const GradOutput db = grad_output(4, gb, b.shape(), b.dtype(), b.device());
                  const GradOutput dbias = grad_output(2, gbias, {w.size(0)}, w.dtype(), w.device());
                  lora_linear_backward(dy, x2, w, a, b, options, saved, dx, da, db, dbias);
                  return std::vector<Tensor>{gx ? dx.reshape(x_shape) : Tensor(), Tensor(), dbias.tensor, da.tensor,
                                             db.tensor};
                });
}

}  // namespace ft::cuda
