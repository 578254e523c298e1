// The CUDA launcher of the batched matmul primitive (matmul.cu, cuBLASLt).
// Compiled only in a CUDA build: callers reach these under `if constexpr (kCudaBuild)`
// (lib/kernel_mode.h), so a CPU-only build links without the .cu files.
#pragma once
#include <cstdint>

#include "lib/ops/matmul/matmul.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// C[b] = alpha · op(A[b]) @ op(B[b]) for `batch` row-major matrices (b_batched false: one shared
/// B); C[b] += ... when accumulate; C[b] = ... + addend[b] when addend (shaped as C) is given.
/// C may be f32 for bf16 A and B (f32 sums, f32 stores).
void matmul(const Tensor& a, const Tensor& b, const Tensor& out, int64_t batch, int64_t m, int64_t n, int64_t k,
            bool trans_a, bool trans_b, bool b_batched, bool accumulate = false, double alpha = 1.0,
            const Tensor& addend = Tensor());

}  // namespace ft::cuda
