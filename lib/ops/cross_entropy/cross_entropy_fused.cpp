// cross_entropy's fused path (CUDA builds only): the loss and dlogits in one kernel forward, dlogits
// scaled by the upstream gradient in backward.
#include <memory>
#include <vector>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/cross_entropy/cross_entropy_cuda.h"
#include "lib/ops/elementwise/elementwise.h"

namespace ft::cuda {

Tensor cross_entropy_fused(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  Tensor loss = Tensor::empty({1}, DType::F32, logits.device());
  const bool grad = needs_grad({&logits});
  Tensor dlogits = grad ? Tensor::empty(logits.shape(), logits.dtype(), logits.device()) : Tensor();
  cross_entropy_forward(logits, targets, options, Tensor(), loss, false, dlogits);
  Tensor out = loss.reshape({});
  if (!grad) return out;
  // dlogits is final up to the upstream factor; backward applies it in place, so the node can
  // run once only.
  auto consumed = std::make_shared<bool>(false);
  return record("cross_entropy", out, {logits}, [dlogits, consumed](const Tensor& g) {
    FT_CHECK(!*consumed, "cross_entropy (fused): backward ran twice through one forward; its gradient is scaled in "
                         "place, so retain_graph is not supported here");
    *consumed = true;
    if (!is_unit_seed(g)) scale_by_upstream(dlogits, ft::cast(g, DType::F32));
    return std::vector<Tensor>{dlogits};
  });
}

}  // namespace ft::cuda
