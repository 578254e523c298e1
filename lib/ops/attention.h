// Scaled dot-product attention: softmax(q·kᵀ/√HS + causal mask) · v, with optional dropout on
// the probabilities.
//
// q, k, v: [B, NH, T, HS], one dtype and device; result [B, NH, T, HS].
// Dropout keeps probability (b, h, i, j) when philox::uniform(seed, offset, flat index) >= p,
// the same (seed, offset, index) scheme as lib/ops/dropout.h; offset is a one-element i64
// tensor on the data's device (PhiloxCounter::take(B·NH·T·T)).
// Twin: matmul, scale, causal mask (where), softmax (max, exp, sum, div), dropout, matmul, as
// separate primitive ops, the way eager frameworks run attention. The fused flash-attention
// kernel is not written yet: every device runs the twin today.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p = 0.0,
                 uint64_t seed = 0, const Tensor& offset = Tensor());
Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                           uint64_t seed, const Tensor& offset);

/// Softmax over the last dim, from primitives (the max shift is taken without history).
Tensor softmax(const Tensor& x);

}  // namespace ft
