// The CUDA launchers of the shape, gather and scatter primitives (shape_ops.cu).
// Compiled only in a CUDA build: callers reach these under `if constexpr (kCudaBuild)`
// (lib/kernel_mode.h), so a CPU-only build links without the .cu files.
#pragma once
#include <cstddef>
#include <cstdint>

#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/tensor.h"

namespace ft::cuda {

void transpose_last2(const Tensor& x, const Tensor& out, int64_t batch, int64_t rows, int64_t cols);
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows);
void gather_rows(const Tensor& table, const Tensor& ids, const Tensor& out);
/// table_grad[ids[i]] += grad[i] (table_grad zeroed by the caller).
void scatter_add_rows(const Tensor& grad, const Tensor& ids, const Tensor& table_grad);
/// out[r] = x[r, ids[r]] for x viewed as [rows, x.size(-1)]; an id out of range flags
/// kIndexOutOfRange and gives 0.
void gather_last(const Tensor& x, const Tensor& ids, const Tensor& out);
/// dst[r, ids[r]] = values[r] (dst zeroed by the caller); ids out of range are skipped.
void put_last(const Tensor& values, const Tensor& ids, const Tensor& dst);

/// Flags `code` in the device error word when an id is outside [0, limit) and not `allowed`.
void validate_ids(const Tensor& ids, int64_t limit, int64_t allowed, unsigned code);

}  // namespace ft::cuda
