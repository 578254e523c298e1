#include "lib/ops/cross_entropy.h"

#include "lib/autograd.h"
#include "lib/cuda/launchers.h"
#include "lib/error.h"
#include "lib/ops/cpu_dispatch.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/reduce.h"

namespace ft {

namespace {

void validate_targets(const Tensor& targets, int64_t vocab, int64_t ignore_index) {
  if (targets.is_cuda()) {
    cuda::validate_ids(targets, vocab, ignore_index, cuda::kTargetOutOfRange);
    return;
  }
  cpu::dispatch_all(targets.dtype(), [&](auto tag) {
    using I = decltype(tag);
    if constexpr (std::is_integral_v<I>) {
      const I* p = targets.data<I>();
      for (int64_t i = 0; i < targets.numel(); ++i) {
        const int64_t t = static_cast<int64_t>(p[i]);
        FT_CHECK((t >= 0 && t < vocab) || t == ignore_index, "cross_entropy: target ", t, " at row ", i,
                 " is out of range [0, ", vocab, ") and is not ignore_index ", ignore_index);
      }
    }
  });
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  check_defined(logits, "cross_entropy", "logits");
  check_defined(targets, "cross_entropy", "targets");
  FT_CHECK(logits.dim() == 2, "cross_entropy: logits must be [N, V], got ", shape_str(logits.shape()));
  FT_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), "cross_entropy: targets must be [",
           logits.size(0), "], got ", shape_str(targets.shape()));
  FT_CHECK(targets.dtype() == DType::I32 || targets.dtype() == DType::I64,
           "cross_entropy: targets must be i32 or i64, got ", dtype_name(targets.dtype()));
  FT_CHECK(targets.device() == logits.device(), "cross_entropy: targets on ", targets.device().str(), ", logits on ",
           logits.device().str());
  const int64_t n = logits.size(0), vocab = logits.size(1);
  validate_targets(targets, vocab, ignore_index);

  const DType compute = logits.dtype() == DType::BF16 ? DType::F32 : logits.dtype();
  Tensor x = cast(logits, compute);
  // The max only shifts for stability; its gradient cancels, so it is taken without history.
  Tensor row_max = max(x, true).detach();
  Tensor lse = log(sum(exp(x - row_max), true)) + row_max;  // [N, 1]
  Tensor ids = Tensor::arange(vocab, targets.dtype(), targets.device());
  Tensor one_hot = cast(eq(ids, targets.reshape({n, 1})), compute);  // [N, V]
  Tensor picked = sum(x * one_hot, false);                           // [N]
  Tensor counted = cast(ne(targets, scalar_like(targets, static_cast<double>(ignore_index))), compute);
  Tensor total = sum_all((lse.reshape({n}) - picked) * counted);
  if (reduction == Reduction::Sum) return total;
  return total / sum_all(counted);
}

}  // namespace ft
