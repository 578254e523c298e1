// Layer normalization over the last dim C: (x - mean) / sqrt(var + eps) · w + b.
// x: [..., C]; w, b: [C]. Statistics in f32 (bf16 inputs are upcast), result in x's dtype.
// Composite of primitives here; the fused kernel arrives with its own dispatch.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

}  // namespace ft
