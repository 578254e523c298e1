#include "lib/ops/linear_cross_entropy/linear_cross_entropy.h"

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/linear_cross_entropy/linear_cross_entropy_cuda.h"
#include "lib/ops/matmul/matmul.h"

namespace ft {

Tensor linear_cross_entropy_composite(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                      CrossEntropyOptions options) {
  return cross_entropy(matmul(x, weight, false, true), targets, options);
}

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            CrossEntropyOptions options, int64_t chunk_rows) {
  check_defined(x, "linear_cross_entropy", "x");
  check_defined(weight, "linear_cross_entropy", "weight");
  FT_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "linear_cross_entropy: x must be [N, C] ",
           "and weight [V, C], got ", shape_str(x.shape()), " and ", shape_str(weight.shape()));
  FT_CHECK(x.dtype() == weight.dtype() && x.device() == weight.device(), "linear_cross_entropy: x is ",
           dtype_name(x.dtype()), " on ", x.device().str(), ", weight ", dtype_name(weight.dtype()), " on ",
           weight.device().str());
  FT_CHECK(chunk_rows > 0, "linear_cross_entropy: chunk_rows must be positive, got ", chunk_rows);
  // Checked before the projection, so bad targets fail before any [N, V] work.
  check_cross_entropy_inputs("linear_cross_entropy", x, weight.size(0), targets, options.ignore_index);
  const bool fused_dtype = x.dtype() == DType::F32 || x.dtype() == DType::BF16;
  if constexpr (kCudaBuild)
    if (use_fused(x) && fused_dtype && x.numel() > 0)
      return cuda::linear_cross_entropy_fused(x, weight, targets, options, chunk_rows);
  return linear_cross_entropy_composite(x, weight, targets, options);
}

}  // namespace ft
