// Rotary position embedding (RoPE; Su et al., 2021) as Llama applies it to queries and keys.
//
// rope(x, config): x [B, T, NH, HS] (f32, f64 or bf16), HS even; result of x's shape and dtype.
// Position t (0..T-1) rotates each pair (x[i], x[i + HS/2]), i < HS/2, by the angle t·f_i,
// f_i = θ^(−2i/HS) (Llama 3 scales them: RopeConfig), as Hugging Face's rotate_half does:
//   y[i] = x[i]·cos − x[i + HS/2]·sin,   y[i + HS/2] = x[i + HS/2]·cos + x[i]·sin.
// The backward is the rotation by the opposite angle. The cosines and sines are computed in f64
// on the host once per (T, HS, config, dtype, device) and kept (rope_tables), so the first call of a
// shape must come before a CUDA graph capture (a training run's eager warm-up steps make it).
// Fused (CUDA, f32/bf16): one kernel reads x and the f32 tables and writes y, in f32 with one
// rounding; backward, the same kernel with the sines negated. It saves nothing for backward.
// Twin: the formula above on the two halves with the tables in x's dtype (narrow, mul, sub, add,
// cat).
// Dimension letters: B batch, T tokens, NH heads, HS head size.
#pragma once
#include <compare>
#include <cstdint>
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// The rotation's frequencies: θ^(−2i/HS), and with `factor` > 0 Llama 3's scaling of them, as
/// Hugging Face's rope_type "llama3" computes it: wavelengths 2π/f above
/// original_max_position / low_freq_factor are divided by `factor`, those below
/// original_max_position / high_freq_factor kept, and those between blended smoothly.
struct RopeConfig {
  double theta = 10000.0;
  double factor = 0.0;  ///< 0: no scaling
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
  bool operator==(const RopeConfig&) const = default;
  auto operator<=>(const RopeConfig&) const = default;
};

Tensor rope(const Tensor& x, const RopeConfig& config);
/// Fails with an ft::Error naming what is wrong with θ or the scaling (every rope op checks).
void check_rope_config(const RopeConfig& config);
Tensor rope_composite(const Tensor& x, const RopeConfig& config);
inline Tensor rope(const Tensor& x, double theta = 10000.0) { return rope(x, RopeConfig{.theta = theta}); }
inline Tensor rope_composite(const Tensor& x, double theta) { return rope_composite(x, RopeConfig{.theta = theta}); }

/// The HS/2 frequencies of `config` for head size HS, in f64.
std::vector<double> rope_frequencies(int64_t head_size, const RopeConfig& config);

/// cos and sin [T, HS/2] of the angles t·f_i, in `dtype` on `device`: made once, kept.
struct RopeTables {
  Tensor cos, sin;
};
RopeTables rope_tables(int64_t tokens, int64_t head_size, const RopeConfig& config, DType dtype, Device device);

}  // namespace ft
