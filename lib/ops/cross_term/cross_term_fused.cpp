// cross_term's fused path (CUDA builds only): one kernel forward, one backward.
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/cross_term/cross_term_cuda.h"

namespace ft::cuda {

Tensor cross_term_fused(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x) {
  Tensor out = Tensor::empty(x0.shape(), x0.dtype(), x0.device());
  cross_term_forward(x0, y, bias, x, out);
  if (!needs_grad({&x0, &y, &bias, &x})) return out;
  return record("cross_term", out, {x0, y, bias, x},
                [x0 = x0.detach(), y = y.detach(), bias = bias.detach(), want_bias = needs_grad({&bias})](const Tensor& g) {
                  Tensor dx0 = Tensor::empty(x0.shape(), x0.dtype(), x0.device());
                  Tensor dy = Tensor::empty(y.shape(), y.dtype(), y.device());
                  const GradOutput dbias =
                      want_bias ? grad_output(2, true, bias.shape(), bias.dtype(), bias.device()) : GradOutput();
                  cross_term_backward(g, x0, y, bias, dx0, dy, dbias);
                  return std::vector<Tensor>{dx0, dy, dbias.tensor, g};
                });
}

}  // namespace ft::cuda
