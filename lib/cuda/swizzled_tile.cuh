// Tiles of rows in shared memory as the Hopper kernels keep them (the attention's heads of
// [T, HS] in lib/ops/attention/attention_hopper*.cu, the product's operand slices in
// lib/ops/matmul/hopper_gemm.cu): TMA copies them with its 128-byte swizzle, one box of 64 bf16
// columns at a time, so a tile of `rows` × D is D / 64 blocks of `rows` × 128 bytes, one after
// the other, 1024-byte aligned. The helpers here copy such a tile and describe its slices as
// wgmma operands (layouts: wgmma.cuh).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "lib/cuda/tma.cuh"
#include "lib/cuda/wgmma.cuh"

namespace ft::cuda::swizzled {

constexpr int kRowBytes = 128;              // a swizzle row: 64 bf16 columns
constexpr int kBoxCols = kRowBytes / 2;     // columns of one TMA box
constexpr uint32_t kGroupBytes = 8 * kRowBytes;  // an 8-row swizzle atom

/// Byte offset of 16-byte chunk `chunk` (of the 8 in a row) of row `row` in a 64-column block.
__device__ __forceinline__ uint32_t offset(int row, int chunk) { return row * kRowBytes + ((chunk ^ (row & 7)) << 4); }

/// Starts the copy of rows [row0, row0 + rows) of this head's [T, D] matrix into `dst`, one
/// box per 64-column block, counted on `barrier`.
template <int D>
__device__ __forceinline__ void load_rows(unsigned char* dst, const CUtensorMap& map, uint64_t* barrier, int rows,
                                          int row0, int head, int batch) {
#pragma unroll
  for (int c = 0; c < D / kBoxCols; ++c)
    tma::load_4d(dst + c * rows * kRowBytes, map, barrier, c * kBoxCols, row0, head, batch);
}

/// The k-th 16-column slice, from row `row0`, of a tile of kRows rows read K-major (its columns
/// are the contraction): 64-column block k / 4, 32 bytes a slice within the row.
template <int kRows>
__device__ __forceinline__ uint64_t k_major_slice(const unsigned char* tile, int row0, int k) {
  return wgmma::descriptor(tile + (k / 4) * kRows * kRowBytes + row0 * kRowBytes + (k % 4) * 32, 16, kGroupBytes);
}

/// The k-th 16-row slice of a tile of kRows rows read MN-major (its rows are the contraction,
/// its columns M or N): the 64-column blocks are kRows rows apart.
template <int kRows>
__device__ __forceinline__ uint64_t mn_major_slice(const unsigned char* tile, int k) {
  return wgmma::descriptor(tile + k * 16 * kRowBytes, kRows * kRowBytes, kGroupBytes);
}

}  // namespace ft::cuda::swizzled
