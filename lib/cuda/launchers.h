// The CUDA launchers behind the primitive ops. Op files call these after checking shapes,
// dtypes and devices; each enqueues on the compute stream and checks its launch.
// In a CPU-only build they are defined by lib/no_cuda.cpp and throw.
#pragma once
#include <cstdint>

#include "lib/autograd.h"
#include "lib/ops/elementwise_math.h"
#include "lib/ops/reduce.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// Codes kernels OR into the device error word; raised as ft::Error at the next synchronizing read.
enum DeviceErrorCode : unsigned { kIndexOutOfRange = 1u, kTargetOutOfRange = 2u, kNormZeroWeight = 4u };

void unary(UnaryOp op, const Tensor& x, const Tensor& out, double p, double q);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan);
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan);
void cast(const Tensor& x, const Tensor& out);
/// dst (f32/f64) = (overwrite ? 0 : dst) + scale · src, src converted as read (lib/ops/elementwise.h).
void accumulate(const Tensor& src, const Tensor& dst, bool overwrite, const Tensor& scale);
void fill(const Tensor& out, double value);
void arange(const Tensor& out);

/// out[r] = reduce(x[r, 0:cols]) for each of `rows` rows.
void reduce_last(ReduceOp op, const Tensor& x, const Tensor& out, int64_t rows, int64_t cols);
/// x viewed as [outer, mid, inner]: out[o, i] = sum over m of x[o, m, i] (deterministic order).
void reduce_middle(const Tensor& x, const Tensor& out, int64_t outer, int64_t mid, int64_t inner);
/// out (f32/bf16 [cols], or an f32 view added into) = column sums of x [rows, cols] (f32/bf16).
void column_sums(const Tensor& x, int64_t rows, int64_t cols, const GradOutput& out);
/// out ([cols], overwritten or an f32 view added into) = Σ over rows of f32 partials
/// [rows, cols], in row order: for a few rows of per-block partials over many columns.
void partial_row_sums(const Tensor& partials, const GradOutput& out);

/// C[b] = alpha · op(A[b]) @ op(B[b]) for `batch` row-major matrices (b_batched false: one shared
/// B); C[b] += ... when accumulate; C[b] = ... + addend[b] when addend (shaped as C) is given.
/// C may be f32 for bf16 A and B (f32 sums, f32 stores).
void matmul(const Tensor& a, const Tensor& b, const Tensor& out, int64_t batch, int64_t m, int64_t n, int64_t k,
            bool trans_a, bool trans_b, bool b_batched, bool accumulate = false, double alpha = 1.0,
            const Tensor& addend = Tensor());

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

/// out[i] = philox::uniform(seed, *offset, i), or philox::dropout_uniform with `dropout_bits`;
/// offset is a one-element i64 device tensor.
void philox_uniform(const Tensor& out, uint64_t seed, const Tensor& offset, bool dropout_bits);
/// used = *counter rounded up to a multiple of 8; *counter = used + step (one thread).
void philox_take(const Tensor& counter, const Tensor& used, uint64_t step);

}  // namespace ft::cuda
