// Two launch shapes shared by the pointwise fused kernels, so each op only writes its
// per-element formula (an Op functor) and no kernel body is repeated:
//
// - map_kernel: a grid-stride loop over VEC-wide groups of a [rows, cols] tensor.
// - map_reduce_columns_kernel: the same map over a (column tile × row block) grid, which also
//   sums the op's per-element results down the columns: each thread keeps its column partials
//   in registers, the row lanes of a block add theirs in lane order through shared memory, the
//   block writes them to scratch, and the last block to finish a column tile adds the partials
//   in row-block order. Deterministic, and no atomics on the values: one arrival
//   counter per column tile, reset by that last block.
//
// Op contract: __device__ void operator()(int64_t row, int64_t col, float (&sums)[VEC]) handles
// elements [col, col + VEC) of the row (col + VEC <= cols is guaranteed when cols % VEC == 0;
// with VEC == 1 any cols works), storing its outputs and returning what the column sums add.
// In the column kernel an Op may instead split its work in two, `Loaded load(row, col) const`
// (its loads only) and `void finish(row, col, const Loaded&, float (&sums)[VEC]) const`; the
// kernel then keeps the next row's loads in flight while it finishes the current row.
// An Op may also have __device__ void prepare(), which each thread runs once on its own copy
// before the loop: for values read from device memory that no iteration changes (the Philox
// offset), which the compiler otherwise loads again in every iteration, ahead of the work that
// depends on them.
#pragma once
#include <algorithm>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/grad_sink.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/fast_divide.h"

namespace ft::cuda {

/// Σ_b partials[b·stride + c] over b < count, as kSumLanes interleaved running sums (independent
/// loads in flight) added in a fixed order: deterministic. One block runs this for a whole
/// column tile while the rest of the GPU waits, so its loads in flight set the kernel's tail.
constexpr int kSumLanes = 16;
__device__ __forceinline__ float sum_rows(const float* partials, unsigned count, int64_t stride, int64_t c) {
  float lanes[kSumLanes] = {};
  unsigned b = 0;
  for (; b + kSumLanes <= count; b += kSumLanes)
#pragma unroll
    for (int k = 0; k < kSumLanes; ++k) lanes[k] += __ldcg(&partials[(b + k) * stride + c]);
  for (; b < count; ++b) lanes[0] += __ldcg(&partials[b * stride + c]);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kSumLanes; ++k) sum += lanes[k];
  return sum;
}

/// *p for prepare(), as a load the compiler keeps in a register: a read-only (__ldg or .nc) load
/// it issued again in every iteration instead (rematerialized, at the launch bound's 64
/// registers), ahead of the Philox work that waits on it.
__device__ __forceinline__ uint64_t load_once(const int64_t* p) {
  uint64_t v;
  asm volatile("ld.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}

/// The thread's copy of op, prepared (see the contract above).
template <class Op>
__device__ __forceinline__ Op prepared(const Op& op) {
  Op local = op;
  if constexpr (requires { local.prepare(); }) local.prepare();
  return local;
}

// `per_row` divides by the groups a row has. Below 2³¹ groups the loop indexes in 32 bits and
// splits a group index into row and column with a multiply-high instead of a 64-bit division.
template <int VEC, class Op>
__global__ void map_kernel(Op shared_op, int64_t rows, int64_t cols, FastDivide per_row) {
  begin_dependent_kernel();
  const Op op = prepared(shared_op);
  const int64_t groups_per_row = cols / VEC, total = rows * groups_per_row;
  float unused[VEC];
  if (total <= kMaxFastDividend) {
    const uint32_t n = static_cast<uint32_t>(total), gpr = static_cast<uint32_t>(groups_per_row);
    for (uint32_t g = blockIdx.x * blockDim.x + threadIdx.x; g < n; g += gridDim.x * blockDim.x) {
      const uint32_t r = per_row.quotient(g);
      op(r, static_cast<int64_t>(g - r * gpr) * VEC, unused);
    }
    return;
  }
  for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < total; g += (int64_t)gridDim.x * blockDim.x)
    op(g / groups_per_row, (g % groups_per_row) * VEC, unused);
}

// At most 512 threads a block, and two such blocks must fit on a multiprocessor: without the
// bound the dropout backward took more registers, one block fitted, and the second half of the
// grid ran as a second wave.
constexpr int kColumnBlockThreads = 512;

template <int VEC, class T, class Op>
__global__ void __launch_bounds__(kColumnBlockThreads, 2) map_reduce_columns_kernel(Op shared_op, int64_t rows, int64_t cols, float* partials, unsigned* counters,
                                          GradSink<T> column_sums) {
  begin_dependent_kernel();
  const Op op = prepared(shared_op);
  // threadIdx.x picks the column group, threadIdx.y the row lane: the lanes of a block walk its
  // rows interleaved, so blockDim.y loads per column group are in flight instead of one.
  const int64_t tile_cols = static_cast<int64_t>(blockDim.x) * VEC;
  const int64_t c0 = blockIdx.x * tile_cols, col = c0 + static_cast<int64_t>(threadIdx.x) * VEC;
  const int64_t rows_per_block = (rows + gridDim.y - 1) / gridDim.y;
  const int64_t r0 = blockIdx.y * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  float acc[VEC] = {};
  if constexpr (requires { op.finish(r0, col, op.load(r0, col), acc); }) {
    // Two-phase op: the lane's next row is loaded before this one is finished, so two loads
    // per thread are in flight (unrolled, the compiler kept the second load behind the first
    // row's store).
    int64_t r = r0 + threadIdx.y;
    if (col < cols && r < r1) {
      auto current = op.load(r, col);
      for (; r < r1; r += blockDim.y) {
        const int64_t next = r + blockDim.y;
        decltype(current) ahead{};
        if (next < r1) ahead = op.load(next, col);
        float sums[VEC];
        op.finish(r, col, current, sums);
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] += sums[k];
        current = ahead;
      }
    }
  } else if (col < cols) {
#pragma unroll 2
    for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
      float sums[VEC];
      op(r, col, sums);
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] += sums[k];
    }
  }
  if (!column_sums.any()) return;
  // The row lanes' sums, added in lane order: lanes 1.. park theirs in shared memory.
  extern __shared__ float lane_sums[];  // [blockDim.y - 1][tile_cols]
  const int64_t local = static_cast<int64_t>(threadIdx.x) * VEC;
  if (threadIdx.y > 0 && col < cols) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) lane_sums[(threadIdx.y - 1) * tile_cols + local + k] = acc[k];
  }
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (unsigned lane = 1; lane < blockDim.y; ++lane)
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] += lane_sums[(lane - 1) * tile_cols + local + k];
#pragma unroll
    for (int k = 0; k < VEC; ++k) partials[blockIdx.y * cols + col + k] = acc[k];
  }
  // The last block of this column tile to arrive adds the partials in row-block order.
  __threadfence();
  __shared__ bool last;
  __syncthreads();
  const unsigned thread = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
  if (thread == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t c1 = min(cols, c0 + tile_cols);
  for (int64_t c = c0 + thread; c < c1; c += threads) column_sums.store(c, sum_rows(partials, gridDim.y, cols, c));
  if (thread == 0) counters[blockIdx.x] = 0;
}

/// Launches op over [rows, cols]. With column_sums given, also stores their column sums there.
template <int VEC, class T, class Op>
void launch_map_reduce_columns(const Op& op, int64_t rows, int64_t cols, GradSink<T> column_sums) {
  // 2 blocks of ~512 threads per SM (the kernel's launch bounds guarantee both fit). The last
  // block of a column tile adds every row block's partials while the rest of the GPU waits, so
  // the tiles are cut narrow enough that each tail adds at most ~kTailRows partial rows and the
  // tails of different tiles run side by side. One 768-column tile with 264 row blocks left a
  // single block adding 264 x 768 partials (the dropout backward's missing bandwidth).
  constexpr int64_t kTailRows = 64;
  const int64_t target_blocks = 2LL * multiprocessor_count();
  const int64_t groups = (cols + VEC - 1) / VEC;
  const int64_t wanted_tiles = (target_blocks + kTailRows - 1) / kTailRows;
  // Tiles of 16 to 128 column groups (a power of two, so blocks have 512 threads: 2 of them per
  // SM is half occupancy; tiles of 12 groups made 384-thread blocks).
  int tile_threads = 128;
  while (tile_threads > 16 && (groups + tile_threads - 1) / tile_threads < wanted_tiles) tile_threads /= 2;
  while (tile_threads > 16 && tile_threads / 2 >= groups) tile_threads /= 2;  // narrow rows
  const int row_lanes = std::max(1, std::min(32, kColumnBlockThreads / tile_threads));
  const int64_t tile_cols = static_cast<int64_t>(tile_threads) * VEC;
  const int64_t col_tiles = (cols + tile_cols - 1) / tile_cols;
  const size_t smem = column_sums.any() ? static_cast<size_t>(row_lanes - 1) * tile_cols * sizeof(float) : 0;
  // Each row lane takes at least kMinLaneRows rows: a narrow tensor (a classifier's 10 columns
  // over 4096 rows) spread over every SM spends its time in blocks' turns at the tile's counter.
  constexpr int64_t kMinLaneRows = 8;
  const int64_t row_blocks = std::max<int64_t>(
      1, std::min<int64_t>({rows, 65535, target_blocks / col_tiles, (rows + row_lanes * kMinLaneRows - 1) /
                                                                         (row_lanes * kMinLaneRows)}));
  ColumnScratch scratch{nullptr, nullptr};
  if (column_sums.any()) scratch = column_scratch(row_blocks, cols, col_tiles);
  dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_blocks));
  dim3 block(static_cast<unsigned>(tile_threads), static_cast<unsigned>(row_lanes));
  launch_dependent(map_reduce_columns_kernel<VEC, T, Op>, grid, block, smem, op, rows, cols, scratch.partials,
                   scratch.counters, column_sums);
  FT_CUDA_CHECK_LAUNCH("map_reduce_columns_kernel");
}

/// Runs `body(tag, vec)` with VEC = the 16-byte pack when the rows and pointers allow, else 1.
template <class Body>
void with_vector_width(DType dtype, const char* op, int64_t cols, std::initializer_list<const void*> pointers,
                       Body&& body) {
  dispatch_half_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if (packable<T>(cols, pointers)) body(tag, std::integral_constant<int, kPackSize<T>>{});
    else body(tag, std::integral_constant<int, 1>{});
  });
}

template <int VEC, class Op>
void launch_map(const Op& op, int64_t rows, int64_t cols) {
  const int64_t groups_per_row = cols / VEC;
  // The 32-bit loop only runs when every group index is below 2³¹, where the divisor fits too.
  const bool fits = groups_per_row >= 1 && groups_per_row <= kMaxFastDividend;
  const FastDivide per_row(fits ? static_cast<uint32_t>(groups_per_row) : 1u);
  launch_dependent(map_kernel<VEC, Op>, elementwise_blocks(rows * groups_per_row, kThreads), kThreads, 0, op, rows,
                   cols, per_row);
  FT_CUDA_CHECK_LAUNCH("map_kernel");
}

}  // namespace ft::cuda
