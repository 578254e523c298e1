// The CUDA launchers of the reductions (reduce.cu).
// Compiled only in a CUDA build: callers reach these under `if constexpr (kCudaBuild)`
// (lib/kernel_mode.h), so a CPU-only build links without the .cu files.
#pragma once
#include <cstdint>

#include "lib/autograd.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// out[r] = reduce(x[r, 0:cols]) for each of `rows` rows.
void reduce_last(ReduceOp op, const Tensor& x, const Tensor& out, int64_t rows, int64_t cols);
/// x viewed as [outer, mid, inner]: out[o, i] = sum over m of x[o, m, i] (deterministic order).
void reduce_middle(const Tensor& x, const Tensor& out, int64_t outer, int64_t mid, int64_t inner);
/// out (f32/bf16 [cols], or an f32 view added into) = column sums of x [rows, cols] (f32/bf16).
void column_sums(const Tensor& x, int64_t rows, int64_t cols, const GradOutput& out);
/// out ([cols], overwritten or an f32 view added into) = Σ over rows of f32 partials
/// [rows, cols], in row order: for a few rows of per-block partials over many columns.
void partial_row_sums(const Tensor& partials, const GradOutput& out);

}  // namespace ft::cuda
