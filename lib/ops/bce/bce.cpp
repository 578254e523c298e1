#include "lib/ops/bce/bce.h"

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bce/bce_cuda.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/reduce/reduce.h"

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
  if constexpr (kCudaBuild)
    if (fused) return cuda::bce_with_logits_fused(logits, targets);
  return binary_cross_entropy_with_logits_composite(logits, targets);
}

}  // namespace ft
