// Matrix product: Eigen on the CPU, cuBLASLt on CUDA.
#pragma once
#include "lib/tensor.h"

namespace ft {

/// op(a) @ op(b), where op transposes the last two dims when asked.
/// a: [..., M, K] (or [..., K, M] with trans_a), b: [..., K, N] (or [..., N, K] with trans_b).
/// Either both have the same leading (batch) dims, or b is 2-D and is shared by every batch.
/// Result: [..., M, N], same dtype (f32/f64/bf16), accumulation in f32 (f64 for f64).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace ft
