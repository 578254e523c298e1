// token_position_embedding's fused path (CUDA builds only): both lookups and their sum in one kernel;
// backward writes only the rows the ids reached, straight into the gradient views.
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/embedding/embedding_cuda.h"

namespace ft::cuda {

Tensor token_position_embedding_fused(const Tensor& ids, const Tensor& tokens, const Tensor& positions) {
  const int64_t c = tokens.size(1);
  Tensor out = Tensor::empty({ids.size(0), ids.size(1), c}, tokens.dtype(), tokens.device());
  token_position_forward(ids, tokens, positions, out);
  if (!needs_grad({&tokens, &positions})) return out;
  return record("token_position_embedding", out, {Tensor(), tokens, positions},
                [saved_ids = ids.detach(), token_shape = tokens.shape(), position_shape = positions.shape()](
                    const Tensor& g) {
                  // Sparse: only the ids' rows and the first T positions are written.
                  const GradOutput dtokens = grad_output(1, true, token_shape, g.dtype(), g.device(), false);
                  const GradOutput dpositions = grad_output(2, true, position_shape, g.dtype(), g.device(), false);
                  token_position_backward(g, saved_ids, dtokens, dpositions);
                  return std::vector<Tensor>{Tensor(), dtokens.tensor, dpositions.tensor};
                });
}

Tensor token_embedding_fused(const Tensor& ids, const Tensor& tokens) {
  std::vector<int64_t> shape = ids.shape();
  shape.push_back(tokens.size(1));
  Tensor out = Tensor::empty(shape, tokens.dtype(), tokens.device());
  token_position_forward(ids, tokens, Tensor(), out);
  if (!needs_grad({&tokens})) return out;
  return record("token_embedding", out, {Tensor(), tokens},
                [saved_ids = ids.detach(), token_shape = tokens.shape()](const Tensor& g) {
                  const GradOutput dtokens = grad_output(1, true, token_shape, g.dtype(), g.device(), false);
                  token_rows_backward(g, saved_ids, dtokens);
                  return std::vector<Tensor>{Tensor(), dtokens.tensor};
                });
}

}  // namespace ft::cuda
