// Dropout with a Philox mask, and the fused bias + dropout + residual of transformer blocks.
//
// Element i is kept when philox::dropout_uniform(seed, offset, i) >= p (compared in f32; the
// uniform is on a 2⁻¹⁶ grid, 16 Philox bits an element, lib/philox.h: the drop rate is p rounded
// up to a multiple of 2⁻¹⁶, so for p close to 1 the kept fraction is relatively low, 0.8% at
// p = 0.999, while the scale stays 1/(1 - p)); kept values
// are scaled by 1/(1 - p). The mask depends only on (seed, offset, i): the fused kernel, the
// twin and the CPU draw it bit for bit alike, for any grid or vector width. `offset` is a
// one-element i64 tensor on the data's device (PhiloxCounter::take), so a captured graph reads
// the counter's value at replay. Backward regenerates the mask: only seed and offset are saved.
// p = 0 returns x (plus bias and residual); p = 1 gives zeros.
//
// bias_dropout_add(x, bias, residual) = residual + dropout(x + bias); bias [C] or undefined,
// residual of x's shape or undefined. Fused (CUDA, f32/bf16): forward one kernel (one Philox call per 8
// elements in bf16 rows of a multiple of 8 columns, per 4 in f32 ones); backward one kernel writing dx and reducing dbias (dresidual is dy itself).
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor dropout(const Tensor& x, double p, uint64_t seed, const Tensor& offset);
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset);
Tensor bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, double p, uint64_t seed,
                        const Tensor& offset);

/// Throws ft::Error unless offset is one i64 element on x's device (every op that draws a
/// Philox mask takes its offset this way).
void check_philox_offset(const char* op, const Tensor& x, const Tensor& offset);

/// The twins, from primitives (philox_uniform, ge, cast, mul, add).
Tensor dropout_composite(const Tensor& x, double p, uint64_t seed, const Tensor& offset);
Tensor bias_dropout_add_composite(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                                  uint64_t seed, const Tensor& offset);

}  // namespace ft
