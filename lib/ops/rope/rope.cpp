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

std::vector<double> rope_frequencies(int64_t head_size, const RopeConfig& c) {
  std::vector<double> f(static_cast<size_t>(head_size / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = std::pow(c.theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_size));
    if (c.factor <= 0) continue;
    // Llama 3: long wavelengths slowed by the factor, short ones kept, the band between blended.
    const double wavelength = 2 * M_PI / f[i], context = static_cast<double>(c.original_max_position);
    if (wavelength > context / c.low_freq_factor) {
      f[i] /= c.factor;
    } else if (wavelength >= context / c.high_freq_factor) {
      const double smooth = (context / wavelength - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
      f[i] = (1 - smooth) * f[i] / c.factor + smooth * f[i];
    }
  }
  return f;
}

RopeTables rope_tables(int64_t tokens, int64_t head_size, const RopeConfig& config, DType dtype, Device device) {
  FT_CHECK(tokens > 0 && head_size > 0 && head_size % 2 == 0 && config.theta > 0.0, "rope: tables need T > 0, an even ",
           "head size and θ > 0, got T ", tokens, ", HS ", head_size, ", θ ", config.theta);
  using Key = std::tuple<int64_t, int64_t, RopeConfig, DType, std::string>;
  static std::mutex mutex;
  static std::map<Key, RopeTables> tables;
  const std::lock_guard<std::mutex> lock(mutex);
  const Key key{tokens, head_size, config, dtype, device.str()};
  if (auto found = tables.find(key); found != tables.end()) return found->second;
  // A copy to the device cannot be captured into a graph: the first call comes before.
  FT_CHECK(!device.is_cuda() || !capturing(), "rope: the tables for T ", tokens, ", HS ", head_size, ", θ ",
           config.theta, " are made on first use, which a CUDA graph capture cannot hold: run the op once before capturing");
  const int64_t half = head_size / 2;
  const std::vector<double> frequencies = rope_frequencies(head_size, config);
  std::vector<double> cos_values(static_cast<size_t>(tokens * half)), sin_values(cos_values.size());
  for (int64_t i = 0; i < half; ++i) {
    for (int64_t t = 0; t < tokens; ++t) {
      const double angle = static_cast<double>(t) * frequencies[static_cast<size_t>(i)];
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

void check_rope(const Tensor& x, const RopeConfig& c) {
  check_defined(x, "rope", "x");
  FT_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && x.size(3) > 0, "rope: x must be [B, T, NH, HS] with HS even, got ",
           shape_str(x.shape()));
  FT_CHECK(is_floating(x.dtype()), "rope: x must be f32, f64 or bf16, got ", dtype_name(x.dtype()));
  check_rope_config(c);
}

}  // namespace

void check_rope_config(const RopeConfig& c) {
  FT_CHECK(c.theta > 0.0 && std::isfinite(c.theta), "rope: θ must be positive and finite, got ", c.theta);
  FT_CHECK(c.factor == 0 || (c.factor >= 1 && c.high_freq_factor > c.low_freq_factor && c.low_freq_factor > 0 &&
                             c.original_max_position > 0),
           "rope: Llama 3 scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and a positive original ",
           "context, got factor ", c.factor, ", low ", c.low_freq_factor, ", high ", c.high_freq_factor, ", context ",
           c.original_max_position);
}

Tensor rope_composite(const Tensor& x, const RopeConfig& config) {
  const int64_t tokens = x.size(1), half = x.size(3) / 2;
  const RopeTables tables = rope_tables(tokens, 2 * half, config, x.dtype(), x.device());
  // [T, 1, HS/2]: every head of a token turns by the same angles.
  const Tensor cos = tables.cos.reshape({tokens, 1, half}), sin = tables.sin.reshape({tokens, 1, half});
  const Tensor first = narrow(x, -1, 0, half), second = narrow(x, -1, half, half);
  return cat({first * cos - second * sin, second * cos + first * sin}, -1);
}

Tensor rope(const Tensor& x, const RopeConfig& config) {
  check_rope(x, config);
  if constexpr (kCudaBuild)
    if (use_fused(x) && (x.dtype() == DType::F32 || x.dtype() == DType::BF16) && x.numel() > 0)
      return cuda::rope_fused(x, config);
  return rope_composite(x, config);
}

}  // namespace ft
