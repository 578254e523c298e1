// The mma.sync flash kernels' shared pieces (attention_forward.cu, attention_backward.cu): the
// swizzled shared-memory tiles, their loads, the two product shapes (scores A·Bᵀ with A in
// registers, and C += P·B with P in registers), and the host side's launch and parameters.
#pragma once
#include <cuda_bf16.h>

#include <cmath>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/mma.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/attention/attention_cuda.h"
#include "lib/ops/attention/attention_tile.cuh"

namespace ft::cuda::flash {

constexpr int kAttnThreads = 128;  // 4 warps, 16 rows of a 64-row tile each
constexpr int kTile = 64;  // keys per streamed tile (forward) and per backward block

/// A tile of rows × D bf16 in shared memory, row-major, its 16-byte chunks swizzled
/// (chunk ^ row % 8): the 8 row addresses of an ldmatrix then fall on 8 different bank groups.
/// Rows of fewer than 8 chunks (the 32-query dSᵀ tile at HS 128) swizzle within the row.
template <int D>
struct Tile {
  static constexpr int kSwizzle = D / 8 < 8 ? D / 8 - 1 : 7;
  bf16* base;
  __device__ bf16* at(int row, int chunk) const { return base + row * D + ((chunk ^ (row & kSwizzle)) << 3); }
};

/// Copies rows [row0, row0 + kRows) of a head's [T, D] matrix into a tile; rows past T read
/// as zeros. Commit and wait are the caller's. Each thread copies one fixed 16-byte column
/// chunk of every (threads / chunks)-th row, so its swizzled shared-memory offset is the same in
/// every pass and the loop unrolls to immediate offsets (the address arithmetic per copy had
/// been a visible share of the kernels' instructions).
template <int D, int kRows>
__device__ __forceinline__ void load_tile(Tile<D> dst, const bf16* src, int64_t token_stride, int row0, int tokens) {
  constexpr int kChunks = D / 8, kRowsPerPass = kAttnThreads / kChunks;
  static_assert(kRows % kRowsPerPass == 0, "whole passes");
  const int c = threadIdx.x % kChunks, first = threadIdx.x / kChunks;
  const bf16* from = src + static_cast<int64_t>(row0 + first) * token_stride + c * 8;
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; ++i) {
    const int r = first + i * kRowsPerPass;
    const bool inside = row0 + r < tokens;
    mma::copy_async16(dst.at(r, c), inside ? from + i * kRowsPerPass * token_stride : src, inside ? 16 : 0);
  }
}

/// One step of a double-buffered loop: starts the copies of the next stage into the other
/// buffer (when there is one), waits for the current stage's copies, and makes them visible to
/// every thread.
template <class LoadNext>
__device__ __forceinline__ void advance_stage(bool has_next, LoadNext&& load_next) {
  if (has_next) {
    load_next();
    mma::commit_copies();
    mma::wait_copies<1>();
  } else {
    mma::wait_copies<0>();
  }
  __syncthreads();
}

/// The key and value tiles of keys [k0, k0 + kTile) of this head.
template <int D>
__device__ __forceinline__ void load_key_values(Tile<D> k, Tile<D> v, const Params& p, int64_t kv_base, int k0) {
  load_tile<D, kTile>(k, p.k + kv_base, p.kv.token, k0, p.tokens);
  load_tile<D, kTile>(v, p.v + kv_base, p.kv.token, k0, p.tokens);
}

/// A fragments of kM row tiles (16 rows each, from row0) of `a`, over the whole of D.
template <int D, int kM>
__device__ __forceinline__ void load_a(uint32_t (&a)[kM][D / 16][4], Tile<D> t, int row0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) mma::load_matrix_x4(a[m][ks], t.at(row0 + 16 * m + lane % 16, 2 * ks + lane / 16));
}

/// c = A·Bᵀ: the warp's kM row tiles (fragments `a`) against kN rows of `b` (from b_row0),
/// contracting over D. Each B fragment loaded from shared memory feeds kM products.
template <int D, int kM, int kN>
__device__ __forceinline__ void scores(float (&c)[kM][kN / 8][4], const uint32_t (&a)[kM][D / 16][4], Tile<D> b,
                                       int b_row0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kN / 8; ++n) c[m][n][0] = c[m][n][1] = c[m][n][2] = c[m][n][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int np = 0; np < kN / 16; ++np) {
      uint32_t bf[4];
      mma::load_matrix_x4(bf, b.at(b_row0 + 16 * np + lane % 8 + (lane / 16) * 8, 2 * ks + (lane / 8) % 2));
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        mma::mma_bf16(c[m][2 * np], a[m][ks], bf[0], bf[1]);
        mma::mma_bf16(c[m][2 * np + 1], a[m][ks], bf[2], bf[3]);
      }
    }
}

/// acc += P·B: P the warp's kM row tiles of kK columns (accumulators, rounded to bf16 as the
/// A operand), B the kK × D rows of `b` from b_row0.
template <int D, int kM, int kK>
__device__ __forceinline__ void accumulate(float (&acc)[kM][D / 8][4], const float (&p)[kM][kK / 8][4], Tile<D> b,
                                           int b_row0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    uint32_t af[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) mma::accumulator_to_a(af[m], p[m][2 * ks], p[m][2 * ks + 1]);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t bf[4];
      mma::load_matrix_x4_trans(bf, b.at(b_row0 + 16 * ks + lane % 8 + ((lane / 8) % 2) * 8, 2 * np + lane / 16));
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        mma::mma_bf16(acc[m][2 * np], af[m], bf[0], bf[1]);
        mma::mma_bf16(acc[m][2 * np + 1], af[m], bf[2], bf[3]);
      }
    }
  }
}

template <class Kernel>
inline void launch(Kernel kernel, dim3 grid, size_t smem, const Params& params, const char* name) {
  if (smem > 48 * 1024)
    FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  launch_dependent(kernel, grid, kAttnThreads, smem, params);
  FT_CUDA_CHECK_LAUNCH(name);
}

inline Params make_params(const AttentionShape& shape, bool causal, double dropout_p, uint64_t seed, const Tensor& offset) {
  Params p{};
  p.heads = static_cast<int>(shape.heads);
  p.group = static_cast<int>(shape.group());
  p.tokens = static_cast<int>(shape.tokens);
  p.causal = causal;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_size)));
  p.scale_log2 = p.scale * kLog2e;
  p.dropout_p = static_cast<float>(dropout_p);
  p.dropout_scale = dropout_p > 0.0 ? static_cast<float>(1.0 / (1.0 - dropout_p)) : 1.0f;
  p.seed = seed;
  p.offset = dropout_p > 0.0 ? offset.data<int64_t>() : nullptr;
  return p;
}


/// Whether the Hopper kernels may run (chosen, built and on an sm_90 device); each direction
/// then asks whether it takes the shape and the tensors.
inline bool prefer_hopper() { return flash_kernels() == FlashKernels::PreferHopper && hopper_flash_supported(); }

}  // namespace ft::cuda::flash
