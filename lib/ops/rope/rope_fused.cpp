// rope's fused path (CUDA builds only): one rotation kernel forward, and the opposite rotation
// backward; nothing is saved but the shared tables.
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/rope/rope_cuda.h"

namespace ft::cuda {

Tensor rope_fused(const Tensor& x, const RopeConfig& config) {
  const RopeTables tables = rope_tables(x.size(1), x.size(3), config, DType::F32, x.device());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  rope_rotate(x, tables.cos, tables.sin, false, y);
  if (!needs_grad({&x})) return y;
  return record("rope", y, {x}, [tables, dtype = x.dtype()](const Tensor& g) {
    const Tensor grad = g.dtype() == dtype ? g : ft::cast(g, dtype);
    Tensor dx = Tensor::empty(grad.shape(), dtype, grad.device());
    rope_rotate(grad, tables.cos, tables.sin, true, dx);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace ft::cuda
