// bias_dropout_add's fused path (CUDA builds only): bias, the Philox mask and the residual in one
// kernel forward; backward redraws the mask from the seed and offset.
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/dropout/dropout_cuda.h"

namespace ft::cuda {

Tensor bias_dropout_add_fused(const Tensor& x, const Tensor& bias, const Tensor& residual, double p, uint64_t seed,
                              const Tensor& offset) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dropout_forward(x, bias, residual, p, seed, offset, out);
  if (!needs_grad({&x, &bias, &residual})) return out;
  const bool want_bias = bias.defined() && bias.requires_grad();
  return record("bias_dropout_add", out, {x, bias, residual},
                [p, seed, offset, want_bias, has_residual = residual.defined()](const Tensor& g) {
                  Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
                  Tensor db = want_bias ? Tensor::empty({g.size(-1)}, g.dtype(), g.device()) : Tensor();
                  dropout_backward(g, p, seed, offset, dx, db);
                  return std::vector<Tensor>{dx, db, has_residual ? g : Tensor()};
                });
}

}  // namespace ft::cuda
