#include "lib/ops/bce.h"

#include <memory>
#include <vector>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/cross_entropy.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/reduce.h"

namespace ft {

Tensor binary_cross_entropy_with_logits_composite(const Tensor& logits, const Tensor& targets) {
  const int64_t n = logits.numel();
  const DType compute = logits.dtype() == DType::BF16 ? DType::F32 : logits.dtype();
  const Tensor x = cast(logits, compute).reshape({n}), y = cast(targets, compute).reshape({n});
  const Tensor positive = relu(x), magnitude = positive + relu(-x);
  const Tensor losses = positive - x * y + log(exp(-magnitude) + 1.0);
  return sum_all(losses) * (1.0 / static_cast<double>(n));
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets) {
  check_defined(logits, "binary_cross_entropy_with_logits", "logits");
  check_defined(targets, "binary_cross_entropy_with_logits", "targets");
  const int64_t n = logits.numel();
  FT_CHECK((logits.dim() == 1 || (logits.dim() == 2 && logits.size(1) == 1)) && n > 0,
           "binary_cross_entropy_with_logits: logits must be [N] or [N, 1] with N > 0, got ", shape_str(logits.shape()));
  FT_CHECK(targets.numel() == n && targets.dim() <= 2, "binary_cross_entropy_with_logits: ", n,
           " logits but targets of shape ", shape_str(targets.shape()));
  FT_CHECK(is_floating(logits.dtype()) && is_floating(targets.dtype()),
           "binary_cross_entropy_with_logits: logits and targets must be floating, got ", dtype_name(logits.dtype()),
           " and ", dtype_name(targets.dtype()));
  FT_CHECK(logits.device() == targets.device(), "binary_cross_entropy_with_logits: logits on ", logits.device().str(),
           ", targets on ", targets.device().str());
  const bool fused = use_fused(logits) && (logits.dtype() == DType::F32 || logits.dtype() == DType::BF16) &&
                     targets.dtype() == DType::F32;
  if (!fused) return binary_cross_entropy_with_logits_composite(logits, targets);
  Tensor loss = Tensor::empty({1}, DType::F32, logits.device());
  const bool grad = needs_grad({&logits});
  Tensor dlogits = grad ? Tensor::empty(logits.shape(), logits.dtype(), logits.device()) : Tensor();
  cuda::bce_with_logits_forward(logits, targets, loss, dlogits);
  Tensor out = loss.reshape({});
  if (!grad) return out;
  // dlogits is final up to the upstream factor, applied in place: the node runs once.
  auto consumed = std::make_shared<bool>(false);
  return record("binary_cross_entropy_with_logits", out, {logits}, [dlogits, consumed](const Tensor& g) {
    FT_CHECK(!*consumed, "binary_cross_entropy_with_logits (fused): backward ran twice through one forward; its "
                         "gradient is scaled in place, so retain_graph is not supported here");
    *consumed = true;
    if (!is_unit_seed(g)) cuda::scale_by_upstream(dlogits, cast(g, DType::F32));
    return std::vector<Tensor>{dlogits};
  });
}

#ifndef FT_WITH_CUDA
namespace cuda {
void bce_with_logits_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  FT_FAIL("fusedtrain was built without CUDA (FT_CUDA=OFF)");
}
}  // namespace cuda
#endif

}  // namespace ft
