// dot_interaction's fused path (CUDA builds only): one kernel forward, one backward.
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/dot_interaction/dot_interaction_cuda.h"

namespace ft::cuda {

Tensor dot_interaction_fused(const Tensor& dense, const Tensor& sparse) {
  const int64_t b = dense.size(0), d = dense.size(1), features = sparse.size(1) + 1;
  Tensor out = Tensor::empty({b, d + features * (features - 1) / 2}, dense.dtype(), dense.device());
  dot_interaction_forward(dense, sparse, out);
  if (!needs_grad({&dense, &sparse})) return out;
  return record("dot_interaction", out, {dense, sparse},
                [dense = dense.detach(), sparse = sparse.detach()](const Tensor& g) {
                  Tensor dense_grad = Tensor::empty(dense.shape(), dense.dtype(), dense.device());
                  Tensor sparse_grad = Tensor::empty(sparse.shape(), sparse.dtype(), sparse.device());
                  dot_interaction_backward(g, dense, sparse, dense_grad, sparse_grad);
                  return std::vector<Tensor>{dense_grad, sparse_grad};
                });
}

}  // namespace ft::cuda
