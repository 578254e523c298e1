#include "lib/ops/rope/rope.h"

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/rope/rope_cuda.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/runtime.h"

namespace ft {

RopeTables rope_tables(int64_t tokens, int64_t head_size, double theta, DType dtype, Device device) {
  FT_CHECK(tokens > 0 && head_size > 0 && head_size % 2 == 0 && theta > 0.0, "rope: tables need T > 0, an even ",
           "head size and θ > 0, got T ", tokens, ", HS ", head_size, ", θ ", theta);
  using Key = std::tuple<int64_t, int64_t, double, DType, std::string>;
  static std::mutex mutex;
  static std::map<Key, RopeTables> tables;
  const std::lock_guard<std::mutex> lock(mutex);
  const Key key{tokens, head_size, theta, dtype, device.str()};
  if (auto found = tables.find(key); found != tables.end()) return found->second;
  // A copy to the device cannot be captured into a graph: the first call comes before.
  FT_CHECK(!device.is_cuda() || !capturing(), "rope: the tables for T ", tokens, ", HS ", head_size, ", θ ", theta,
           " are made on first use, which a CUDA graph capture cannot hold: run the op once before capturing");
  const int64_t half = head_size / 2;
  std::vector<double> cos_values(static_cast<size_t>(tokens * half)), sin_values(cos_values.size());
  for (int64_t i = 0; i < half; ++i) {
    const double frequency = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_size));
    for (int64_t t = 0; t < tokens; ++t) {
      const double angle = static_cast<double>(t) * frequency;
      cos_values[static_cast<size_t>(t * half + i)] = std::cos(angle);
      sin_values[static_cast<size_t>(t * half + i)] = std::sin(angle);
    }
  }
  RopeTables made{Tensor::from_vector(cos_values, {tokens, half}, dtype).to(device),
                  Tensor::from_vector(sin_values, {tokens, half}, dtype).to(device)};
  tables.emplace(key, made);
  return made;
}

namespace {

void check_rope(const Tensor& x, double theta) {
  check_defined(x, "rope", "x");
  FT_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && x.size(3) > 0, "rope: x must be [B, T, NH, HS] with HS even, got ",
           shape_str(x.shape()));
  FT_CHECK(is_floating(x.dtype()), "rope: x must be f32, f64 or bf16, got ", dtype_name(x.dtype()));
  FT_CHECK(theta > 0.0 && std::isfinite(theta), "rope: θ must be positive and finite, got ", theta);
}

}  // namespace

Tensor rope_composite(const Tensor& x, double theta) {
  const int64_t tokens = x.size(1), half = x.size(3) / 2;
  const RopeTables tables = rope_tables(tokens, 2 * half, theta, x.dtype(), x.device());
  // [T, 1, HS/2]: every head of a token turns by the same angles.
  const Tensor cos = tables.cos.reshape({tokens, 1, half}), sin = tables.sin.reshape({tokens, 1, half});
  const Tensor first = narrow(x, -1, 0, half), second = narrow(x, -1, half, half);
  return cat({first * cos - second * sin, second * cos + first * sin}, -1);
}

Tensor rope(const Tensor& x, double theta) {
  check_rope(x, theta);
  if constexpr (kCudaBuild)
    if (use_fused(x) && (x.dtype() == DType::F32 || x.dtype() == DType::BF16) && x.numel() > 0)
      return cuda::rope_fused(x, theta);
  return rope_composite(x, theta);
}

}  // namespace ft
