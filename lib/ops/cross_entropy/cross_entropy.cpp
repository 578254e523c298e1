#include "lib/ops/cross_entropy/cross_entropy.h"

#include <type_traits>

#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/cross_entropy/cross_entropy_cuda.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/ops/shape_ops/shape_ops_cuda.h"
#include "lib/ops/softmax/softmax.h"
#include "lib/runtime.h"

namespace ft {

void check_cross_entropy_inputs(const char* op, const Tensor& logits_or_x, int64_t vocab, const Tensor& targets,
                                int64_t ignore_index) {
  check_defined(targets, op, "targets");
  const int64_t n = logits_or_x.size(0);
  FT_CHECK(targets.dim() == 1 && targets.size(0) == n, op, ": targets must be [", n, "], got ",
           shape_str(targets.shape()));
  FT_CHECK(targets.dtype() == DType::I32 || targets.dtype() == DType::I64, op, ": targets must be i32 or i64, got ",
           dtype_name(targets.dtype()));
  FT_CHECK(targets.device() == logits_or_x.device(), op, ": targets on ", targets.device().str(), ", inputs on ",
           logits_or_x.device().str());
  if (targets.is_cuda()) return;  // checked on the device, raised at the next synchronizing read
  cpu::dispatch_all(targets.dtype(), [&](auto tag) {
    using I = decltype(tag);
    if constexpr (std::is_integral_v<I>) {
      const I* p = targets.data<I>();
      for (int64_t i = 0; i < targets.numel(); ++i) {
        const int64_t t = static_cast<int64_t>(p[i]);
        FT_CHECK((t >= 0 && t < vocab) || t == ignore_index, op, ": target ", t, " at row ", i,
                 " is out of range [0, ", vocab, ") and is not ignore_index ", ignore_index);
      }
    }
  });
}

namespace {

void check_logits(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  check_defined(logits, "cross_entropy", "logits");
  FT_CHECK(logits.dim() == 2, "cross_entropy: logits must be [N, V], got ", shape_str(logits.shape()));
  FT_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  check_cross_entropy_inputs("cross_entropy", logits, logits.size(1), targets, options.ignore_index);
}

}  // namespace

Tensor cross_entropy_composite(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  const DType compute = logits.dtype() == DType::BF16 ? DType::F32 : logits.dtype();
  // As eager frameworks run it: log-softmax (f32 for bf16 logits), then the target's log-
  // probability picked out of each row (gather), never a one-hot [N, V].
  Tensor logp = log_softmax(logits, compute);
  Tensor counted_u8 = ne(targets, scalar_like(targets, static_cast<double>(options.ignore_index)));
  Tensor picked_ids = where(counted_u8, targets, scalar_like(targets, 0.0));  // ignored rows pick column 0, weighed 0
  Tensor nll = gather_last(logp, picked_ids) * -(1.0 - options.label_smoothing);
  if (options.label_smoothing > 0.0) nll = nll - mean(logp, false) * options.label_smoothing;
  Tensor counted = cast(counted_u8, compute);
  Tensor total = sum_all(nll * counted);
  if (options.reduction == Reduction::Sum) return total;
  return total / sum_all(counted);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  check_logits(logits, targets, options);
  const bool fused_dtype = logits.dtype() == DType::F32 || logits.dtype() == DType::BF16;
  if constexpr (kCudaBuild) {
    if (use_fused(logits) && fused_dtype && logits.numel() > 0)
      return cuda::cross_entropy_fused(logits, targets, options);
    if (targets.is_cuda()) cuda::validate_ids(targets, logits.size(1), options.ignore_index, cuda::kTargetOutOfRange);
  }
  return cross_entropy_composite(logits, targets, options);
}

}  // namespace ft
