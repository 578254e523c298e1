#include "lib/ops/dot_interaction/dot_interaction.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/dot_interaction/dot_interaction_cuda.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/shape_ops/shape_ops.h"

namespace ft {

namespace {

/// The flat [F·F] positions of the strictly lower triangle, row-major, as i32 on `device`. Made
/// once per (device, F) and kept: the first call uploads it, which the eager steps before a
/// CUDA graph's capture do, so a captured step only reads it.
Tensor lower_triangle_index(int64_t features, Device device) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int64_t>, Tensor> cache;
  std::lock_guard<std::mutex> lock(mutex);
  Tensor& slot = cache[{device.str(), features}];
  if (!slot.defined()) {
    std::vector<double> index;
    for (int64_t i = 1; i < features; ++i)
      for (int64_t j = 0; j < i; ++j) index.push_back(static_cast<double>(i * features + j));
    slot = Tensor::from_vector(index, {static_cast<int64_t>(index.size())}, DType::I32).to(device);
  }
  return slot;
}

}  // namespace

Tensor dot_interaction_composite(const Tensor& dense, const Tensor& sparse) {
  const int64_t b = dense.size(0), d = dense.size(1), features = sparse.size(1) + 1;
  const Tensor x = cat({dense.reshape({b, 1, d}), sparse}, 1);                  // [B, F, D]
  const Tensor gram = matmul(x, x, false, true).reshape({b, features * features});  // [B, F·F]
  const Tensor pairs = transpose(gather_rows(transpose(gram), lower_triangle_index(features, dense.device())));
  return cat({dense, pairs}, 1);
}

Tensor dot_interaction(const Tensor& dense, const Tensor& sparse) {
  check_defined(dense, "dot_interaction", "dense");
  check_defined(sparse, "dot_interaction", "sparse");
  FT_CHECK(dense.dim() == 2 && sparse.dim() == 3 && sparse.size(0) == dense.size(0) && sparse.size(2) == dense.size(1),
           "dot_interaction: dense must be [B, D] and sparse [B, T, D], got ", shape_str(dense.shape()), " and ",
           shape_str(sparse.shape()));
  FT_CHECK(dense.dtype() == sparse.dtype() && is_floating(dense.dtype()) && dense.device() == sparse.device(),
           "dot_interaction: dense and sparse must share a floating dtype and a device, got ",
           dtype_name(dense.dtype()), " on ", dense.device().str(), " and ", dtype_name(sparse.dtype()), " on ",
           sparse.device().str());
  const int64_t b = dense.size(0), d = dense.size(1), features = sparse.size(1) + 1;
  if constexpr (kCudaBuild)
    if (use_fused(dense) && (dense.dtype() == DType::F32 || dense.dtype() == DType::BF16) && b > 0 &&
        cuda::dot_interaction_supported(features, d))
      return cuda::dot_interaction_fused(dense, sparse);
  return dot_interaction_composite(dense, sparse);
}

}  // namespace ft
