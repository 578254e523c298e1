// Matrix product: Eigen on the CPU, cuBLASLt on CUDA.
#pragma once
#include "lib/tensor.h"

namespace ft {

/// op(a) @ op(b), where op transposes the last two dims when asked.
/// a: [..., M, K] (or [..., K, M] with trans_a), b: [..., K, N] (or [..., N, K] with trans_b).
/// Either both have the same leading (batch) dims, or b is 2-D and is shared by every batch.
/// Result: alpha · op(a) @ op(b), [..., M, N], same dtype (f32/f64/bf16), accumulation in f32
/// (f64 for f64); alpha scales in that precision before the one rounding to the result's dtype
/// (cuBLAS's alpha, as attention scales its scores by 1/√HS).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false, double alpha = 1.0);

}  // namespace ft
