// Rotary position embedding (RoPE; Su et al., 2021) as Llama applies it to queries and keys.
//
// rope(x, theta): x [B, T, NH, HS] (f32, f64 or bf16), HS even; result of x's shape and dtype.
// Position t (0..T-1) rotates each pair (x[i], x[i + HS/2]), i < HS/2, by the angle
// t·θ^(−2i/HS), as Hugging Face's rotate_half does:
//   y[i] = x[i]·cos − x[i + HS/2]·sin,   y[i + HS/2] = x[i + HS/2]·cos + x[i]·sin.
// The backward is the rotation by the opposite angle. The cosines and sines are computed in f64
// on the host once per (T, HS, θ, dtype, device) and kept (rope_tables), so the first call of a
// shape must come before a CUDA graph capture (a training run's eager warm-up steps make it).
// Fused (CUDA, f32/bf16): one kernel reads x and the f32 tables and writes y, in f32 with one
// rounding; backward, the same kernel with the sines negated. It saves nothing for backward.
// Twin: the formula above on the two halves with the tables in x's dtype (narrow, mul, sub, add,
// cat).
// Dimension letters: B batch, T tokens, NH heads, HS head size.
#pragma once
#include <cstdint>

#include "lib/tensor.h"

namespace ft {

Tensor rope(const Tensor& x, double theta = 10000.0);
Tensor rope_composite(const Tensor& x, double theta);

/// cos and sin [T, HS/2] of the angles t·θ^(−2i/HS), in `dtype` on `device`: made once, kept.
struct RopeTables {
  Tensor cos, sin;
};
RopeTables rope_tables(int64_t tokens, int64_t head_size, double theta, DType dtype, Device device);

}  // namespace ft
