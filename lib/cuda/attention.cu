// Flash attention on the tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate), after
// FlashAttention-2 (Dao, 2023). The [T, T] score matrix never reaches HBM:
//
// - forward: a block takes 128 query rows at HS 64 (two 16-row tiles per warp) or 64 at HS 128
//   and streams 64-key tiles of K and V through shared memory (double-buffered cp.async). Scores, the online softmax (running max
//   and sum per row) and the P·V product stay in registers: the probabilities' accumulator
//   fragments are the A operand of the next mma (mma::accumulator_to_a). Saves the output and
//   the log-sum-exp of each row, nothing else. On sm_90 the forward on wgmma and TMA
//   (attention_hopper.cu) runs instead where TMA can address the inputs; this one runs
//   everywhere else, and on request (set_flash_kernels).
// - backward, one kernel after a small row kernel for Δ_i = dO_i·O_i. A block owns a 64-key
//   tile and streams the query tiles, recomputing the probabilities from the saved
//   log-sum-exp: Sᵀ = K·Qᵀ, dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − Δ), dK += dSᵀ·Q (Sᵀ rather
//   than S makes Pᵀ and dSᵀ arrive as A fragments of the dV and dK products), and the key
//   tile's share of the query tile's gradient, dS·K, from dSᵀ parked in shared memory. The
//   shares of one query tile are added in a fixed order, from the key tile on the diagonal
//   down to key tile 0, through an f32 buffer and a turn counter per query tile: the first
//   share is stored, each later one waits for its turn and adds (the bulk copy engine does the
//   adds), and a small kernel writes dQ in bf16 from the sums. That is FlashAttention-2's 5
//   products per tile pair with a bit-reproducible dQ (its dQ is added with atomics in whatever
//   order blocks arrive); the two-kernel form this replaced recomputed S and dP for dQ (7
//   products).
// - dropout on the probabilities: element (b, h, i, j) is kept when
//   philox::dropout_uniform(seed, offset, ((b·NH + h)·T + i)·T + j) >= p, exactly the twin's draw; the
//   backward regenerates it.
//
// Every product is one of two shapes (scores: A·Bᵀ, A as fragments in registers and B row-major
// in shared memory; accumulate: C += P·B with P in registers), plus dS·K with both operands in
// shared memory. Measured speed: docs/performance.md.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "lib/cuda/attention_dq.cuh"
#include "lib/cuda/attention_hopper.h"
#include "lib/cuda/attention_tile.cuh"
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/mma.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/attention.h"

namespace ft::cuda {

namespace {

using namespace flash;
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
__device__ __forceinline__ void load_key_values(Tile<D> k, Tile<D> v, const Params& p, int64_t in_base, int k0) {
  load_tile<D, kTile>(k, p.k + in_base, p.in.token, k0, p.tokens);
  load_tile<D, kTile>(v, p.v + in_base, p.in.token, k0, p.tokens);
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

/// Query rows per forward block: 4 warps of kForwardTiles 16-row tiles. Two tiles per warp at
/// HS 64 let each K and V fragment read from shared memory feed two products; at HS 128 the
/// output accumulators of two tiles would not fit in registers.
template <int D>
constexpr int kForwardTiles = D <= 64 ? 2 : 1;
template <int D>
constexpr int kForwardRows = 4 * 16 * kForwardTiles<D>;

template <int D, bool kDropout>
__global__ void __launch_bounds__(kAttnThreads) attention_forward_kernel(const __grid_constant__ Params p, int group) {
  begin_dependent_kernel();
  constexpr int kM = kForwardTiles<D>, kRows = kForwardRows<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* const base = reinterpret_cast<bf16*>(smem);
  const Tile<D> q_tile{base};
  auto k_tile = [&](int buf) { return Tile<D>{base + kRows * D + buf * kTile * D}; };
  auto v_tile = [&](int buf) { return Tile<D>{base + kRows * D + (2 + buf) * kTile * D}; };
  const int query_tiles = (p.tokens + kRows - 1) / kRows;
  const CausalTask task = causal_task(blockIdx.x, query_tiles, gridDim.x / query_tiles, group);
  const int q0 = task.query_tile * kRows, warp = threadIdx.x / 32;
  const int64_t in_base = head_offset(p.in, p.heads, task.head);
  const int all_tiles = (p.tokens + kTile - 1) / kTile;
  const int key_tiles = p.causal ? min(all_tiles, (q0 + kRows + kTile - 1) / kTile) : all_tiles;
  load_tile<D, kRows>(q_tile, p.q + in_base, p.in.token, q0, p.tokens);
  load_key_values<D>(k_tile(0), v_tile(0), p, in_base, 0);
  mma::commit_copies();

  const int row0 = q0 + warp * 16 * kM;  // the warp's first query row
  uint32_t qf[kM][D / 16][4];
  float acc[kM][D / 8][4] = {};
  float row_max[kM][2], row_sum[kM][2];
#pragma unroll
  for (int m = 0; m < kM; ++m) row_max[m][0] = row_max[m][1] = -INFINITY, row_sum[m][0] = row_sum[m][1] = 0.0f;
  for (int kt = 0; kt < key_tiles; ++kt) {
    const int buf = kt & 1, k0 = kt * kTile;
    advance_stage(kt + 1 < key_tiles, [&] { load_key_values<D>(k_tile(buf ^ 1), v_tile(buf ^ 1), p, in_base, k0 + kTile); });
    if (kt == 0) load_a<D, kM>(qf, q_tile, warp * 16 * kM);
    float s[kM][kTile / 8][4];
    scores<D, kM, kTile>(s, qf, k_tile(buf), 0);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (edge_tile(p, k0, kTile, q0)) mask_scores(s[m], p, row0 + 16 * m, k0);
      online_softmax_step(s[m], acc[m], row_max[m], row_sum[m], p.scale_log2);
      if constexpr (kDropout)
        apply_dropout(s[m], p, [&](int n, int e) {
          return probability_index(p.tokens, task.head, row0 + 16 * m + fragment_row(e), k0 + fragment_col(n, e));
        });
    }
    accumulate<D, kM, kTile>(acc, s, v_tile(buf), 0);
    __syncthreads();  // every warp is done with this buffer before the next prefetch refills it
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) finish_rows<D>(p, task.head, row0 + 16 * m, acc[m], row_max[m], row_sum[m]);
}

/// The QKV bias partials of a chunk kernel's block (blockIdx.x: the chunk of kQkvBiasRows tokens,
/// blockIdx.y = b·NH + h), at its head's columns of Q's part (K's and V's are NH·HS and 2·NH·HS
/// further).
template <int D>
__device__ __forceinline__ float* chunk_bias_partials(const Params& p) {
  const int64_t bh = blockIdx.y, chunks = gridDim.x;
  return p.qkv_bias_partials + ((bh / p.heads) * chunks + blockIdx.x) * 3 * p.heads * D + (bh % p.heads) * D;
}

/// The thread layout of the chunk kernels (the Δ and dQ finish kernels): a block takes
/// kQkvBiasRows tokens of one head (blockIdx.x: the chunk, blockIdx.y = b·NH + h), D / 8 lanes a
/// row, 8 columns each, its row lanes taking every kRowLanes-th token.
template <int D>
struct ChunkLanes {
  static constexpr int kLanes = D / 8, kRowLanes = kAttnThreads / kLanes;
  int lane = threadIdx.x % kLanes, row_lane = threadIdx.x / kLanes;
  int64_t bh = blockIdx.y;
  int t0 = blockIdx.x * kQkvBiasRows;  // the chunk's first token
};

/// A chunk kernel's column sums: each thread holds 8 columns' sums of its row lane (ChunkLanes);
/// the row lanes' sums are added in lane order through shared memory. Thread c < D gets column
/// c's; every thread of the block must call it.
template <int D>
__device__ __forceinline__ float chunk_column_sum(const float (&column)[8]) {
  const ChunkLanes<D> at;
  __shared__ float lane_sums[ChunkLanes<D>::kRowLanes][D];
#pragma unroll
  for (int k = 0; k < 8; ++k) lane_sums[at.row_lane][at.lane * 8 + k] = column[k];
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x < D)
#pragma unroll
    for (int r = 0; r < ChunkLanes<D>::kRowLanes; ++r) total += lane_sums[r][threadIdx.x];
  return total;
}

/// Δ_i = Σ_d dO[i, d]·O[i, d] for each head's rows. A block takes kQkvBiasRows rows of one head
/// (blockIdx.y = b·NH + h): D / 8 lanes a row, each reading 16 bytes of O and dO (one warp per
/// row, reading 4 bytes a lane, ran at half the bandwidth: 33 us on the H100 for the GPT-2
/// shape), its row lanes taking every kRowLanes-th row. Into p.delta ([B·NH, T]), or, for the
/// Hopper backward, into p.row_stats next to lse·log2(e) in tiles of kStatTileRows rows (rows
/// per head padded to whole tiles: Δ 0 and an infinite log-sum-exp there, probability 0).
/// With Params::qkv_bias_partials (no dropout) it also writes the chunk's rows of the QKV
/// bias's K and V parts: Σ_keys dV_j = Σ_i (Σ_j P_ij) dO_i = Σ_i dO_i, the probabilities of a
/// row summing to 1, so V's part is the column sums of dO, read here anyway; and Σ_keys dK_j =
/// scale·Σ_i (Σ_j dS_ij) Q_i = 0, a softmax's gradient summing to 0 along its row (adding one
/// vector to every key moves a query's scores by one constant), so K's part is 0.
template <int D>
__global__ void __launch_bounds__(kAttnThreads) attention_delta_kernel(const __grid_constant__ Params p,
                                                                       int padded_tokens) {
  begin_dependent_kernel();
  const ChunkLanes<D> at;
  constexpr int kLanes = ChunkLanes<D>::kLanes, kRowLanes = ChunkLanes<D>::kRowLanes;
  const int lane = at.lane, row_lane = at.row_lane;
  const int64_t bh = at.bh;
  const int t0 = at.t0, t1 = min(padded_tokens, t0 + kQkvBiasRows);
  const int64_t head_at = (bh / p.heads) * p.out_strides.batch + (bh % p.heads) * p.out_strides.head + lane * 8;
  float column[8] = {};
  // The same trip count in every thread: the lanes of a row add their products by shuffles.
#pragma unroll 4
  for (int base = t0; base < t1; base += kRowLanes) {
    const int t = base + row_lane;
    float sum = 0.0f;
    if (t < min(t1, p.tokens)) {
      float o[8], g[8];
      load_pack<bf16, 8>(p.o + head_at + t * p.out_strides.token, o);
      load_pack<bf16, 8>(p.dout + head_at + t * p.out_strides.token, g);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        sum += o[k] * g[k];
        column[k] += g[k];
      }
    }
#pragma unroll
    for (int width = kLanes / 2; width > 0; width /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, width);
    if (t >= t1 || lane != 0) continue;
    const int64_t row = bh * padded_tokens + t;
    if (p.row_stats == nullptr) {
      p.delta[row] = sum;
      continue;
    }
    float* const tile = p.row_stats + (row / kStatTileRows) * 2 * kStatTileRows;
    tile[row % kStatTileRows] = t < p.tokens ? p.lse[bh * p.tokens + t] * kLog2e : INFINITY;
    tile[kStatTileRows + row % kStatTileRows] = sum;
  }
  if (p.qkv_bias_partials == nullptr) return;
  float* const row = chunk_bias_partials<D>(p);
  const float total = chunk_column_sum<D>(column);
  if (threadIdx.x >= D) return;
  row[p.heads * D + threadIdx.x] = 0.0f;       // K's columns
  row[2 * p.heads * D + threadIdx.x] = total;  // V's
}

/// Whether the backward kernel keeps its two fixed A operands (K and V) in registers across the
/// loop, or reads them from shared memory again each step: at HS 128 they would take 64
/// registers and the kernel spilled.
template <int D>
constexpr bool kHoldFragments = D <= 64;

/// acc = dS·K over the key tile for the warp's DqTile: dS read transposed out of the block's
/// tile of dSᵀ (keys × queries, ldmatrix.trans gives the A fragments), K as the B operand as in
/// accumulate().
template <int D, int kRows>
__device__ __forceinline__ void ds_times_k(float (&acc)[8][4], Tile<kRows> ds_t, Tile<D> k) {
  const int lane = threadIdx.x % 32, q_chunk = DqTile<D>::row0() / 8, d_chunk = DqTile<D>::col0() / 8;
#pragma unroll
  for (int n = 0; n < 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kTile / 16; ++ks) {
    uint32_t af[4];
    mma::load_matrix_x4_trans(af, ds_t.at(16 * ks + lane % 8 + (lane / 16) * 8, q_chunk + (lane / 8) % 2));
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bf[4];
      mma::load_matrix_x4_trans(bf, k.at(16 * ks + lane % 8 + ((lane / 8) % 2) * 8, d_chunk + 2 * np + lane / 16));
      mma::mma_bf16(acc[2 * np], af, bf[0], bf[1]);
      mma::mma_bf16(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

/// dQ in bf16, scaled, from the f32 sums of its shares (query tiles of kRows rows, the shares
/// from key tiles of `key_tile` keys), a chunk of tokens a block (ChunkLanes).
/// With Params::qkv_bias_partials it also writes the chunk's column sums of dQ as stored, the
/// row lanes' sums added in lane order.
/// It overlaps the backward (begin_overlapping_kernel): a block waits for its query tiles' last
/// turns, not for the whole backward, so the chunks whose shares are all in are written on the
/// SMs that the causal backward's last, longest blocks leave idle. It touches only dQ, Q's
/// columns of the bias partials and the sums, none of which the backward reads after the turns.
template <int D, int kRows>
__global__ void __launch_bounds__(kAttnThreads) attention_dq_finish_kernel(const __grid_constant__ Params p,
                                                                          int key_tile) {
  begin_overlapping_kernel();
  const ChunkLanes<D> at;
  constexpr int kRowLanes = ChunkLanes<D>::kRowLanes;
  const int64_t bh = at.bh;
  const int query_tiles = (p.tokens + kRows - 1) / kRows;
  const int t0 = at.t0, t1 = min(p.tokens, t0 + kQkvBiasRows);
  if (threadIdx.x == 0) {
    for (int qt = t0 / kRows; qt <= (t1 - 1) / kRows; ++qt) {
      int seen = -1;
      const int shares = dq_share_count(qt, kRows, key_tile, p.tokens, p.causal);
      wait_for_turn(p.dq_turns + bh * query_tiles + qt, shares, seen);
    }
    // The last share's copy was complete, and fenced, before its turn was passed on.
    ::cuda::atomic_thread_fence(::cuda::memory_order_acquire, ::cuda::thread_scope_device);
  }
  __syncthreads();
  const float* const sums = p.dq_sum + bh * query_tiles * kRows * kDqStride<D> + at.lane * 8;
  bf16* const dq = p.dq + (bh / p.heads) * p.in.batch + (bh % p.heads) * p.in.head + at.lane * 8;
  float column[8] = {};
#pragma unroll 4
  for (int t = t0 + at.row_lane; t < t1; t += kRowLanes) {
    const float* sum = sums + static_cast<int64_t>(t) * kDqStride<D>;  // tiles of kRows rows, back to back
    // Through L2 (.cg): written by other blocks' bulk copies while this kernel ran.
    const float4* const pair = reinterpret_cast<const float4*>(sum);
    const float4 lo = __ldcg(pair), hi = __ldcg(pair + 1);
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      v[k] = rounded<bf16>(v[k] * p.scale);  // as stored
      column[k] += v[k];
    }
    store_pack<bf16, 8>(dq + t * p.in.token, v);
  }
  if (p.qkv_bias_partials != nullptr) {
    float* const row = chunk_bias_partials<D>(p);
    const float total = chunk_column_sum<D>(column);
    if (threadIdx.x < D) row[threadIdx.x] = total;  // Q's columns
  }
  end_overlapping_kernel();
}

template <int D, bool kDropout>
__global__ void __launch_bounds__(kAttnThreads) attention_backward_kernel(const __grid_constant__ Params p) {
  begin_dependent_kernel();
  constexpr int kRows = kBackwardQueryRows<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* const base = reinterpret_cast<bf16*>(smem);
  const Tile<D> k_tile{base}, v_tile{base + kTile * D};
  auto q_tile = [&](int buf) { return Tile<D>{base + 2 * kTile * D + buf * kRows * D}; };
  auto do_tile = [&](int buf) { return Tile<D>{base + 2 * kTile * D + (2 + buf) * kRows * D}; };
  const Tile<kRows> ds_tile{base + 2 * kTile * D + 4 * kRows * D};  // dSᵀ of the step, keys × queries
  float* const row_stats = reinterpret_cast<float*>(ds_tile.base + kTile * kRows);  // [buf][lse2, Δ][kRows]
  float* const dq_stage = row_stats + 4 * kRows;  // two staged dQ shares, used in alternate steps
  // Key tiles in reverse block order: a block waits for its turn only on blocks of lower index.
  const int key_tiles = gridDim.x, kt = key_tiles - 1 - blockIdx.x, k0 = kt * kTile, warp = threadIdx.x / 32;
  const int64_t in_base = head_offset(p.in, p.heads), out_base = head_offset(p.out_strides, p.heads);
  const int64_t stat_base = static_cast<int64_t>(head_index()) * p.tokens;
  const int first = p.causal ? k0 / kRows : 0, query_tiles = (p.tokens + kRows - 1) / kRows;
  DqShares shares{p.dq_sum + static_cast<int64_t>(head_index()) * query_tiles * kDqShareFloats<D>,
                  p.dq_turns + static_cast<int64_t>(head_index()) * query_tiles};
  auto load_queries = [&](int qt, int buf) {
    load_tile<D, kRows>(q_tile(buf), p.q + in_base, p.in.token, qt * kRows, p.tokens);
    load_tile<D, kRows>(do_tile(buf), p.dout + out_base, p.out_strides.token, qt * kRows, p.tokens);
    for (int i = threadIdx.x; i < kRows; i += kAttnThreads) {
      const int row = qt * kRows + i;
      // A query past T gets an infinite log-sum-exp: probability 0 everywhere.
      row_stats[buf * 2 * kRows + i] = row < p.tokens ? p.lse[stat_base + row] * kLog2e : INFINITY;
      row_stats[buf * 2 * kRows + kRows + i] = row < p.tokens ? p.delta[stat_base + row] : 0.0f;
    }
  };
  load_tile<D, kTile>(k_tile, p.k + in_base, p.in.token, k0, p.tokens);
  load_tile<D, kTile>(v_tile, p.v + in_base, p.in.token, k0, p.tokens);
  load_queries(first, 0);
  mma::commit_copies();

  const int key0 = k0 + warp * 16;  // the warp's first key (rows of Sᵀ)
  uint32_t kf[1][D / 16][4], vf[1][D / 16][4];
  float dk[1][D / 8][4] = {}, dv[1][D / 8][4] = {};
  auto staged_share = [&](int qt) { return dq_stage + (qt & 1) * kDqShareFloats<D>; };
  auto issue_share = [&](int qt) {  // thread 0
    shares.issue(staged_share(qt), qt, dq_share_count(qt, kRows, kTile, p.tokens, p.causal) - 1 - kt,
                 kDqShareFloats<D>);
  };
  for (int qt = first; qt < query_tiles; ++qt) {
    const int buf = (qt - first) & 1;
    if (threadIdx.x == 0) {
      shares.complete();
      if (qt > first) shares.peek(qt - 1);
    }
    advance_stage(qt + 1 < query_tiles, [&] { load_queries(qt + 1, buf ^ 1); });
    if (threadIdx.x == 0 && qt > first) issue_share(qt - 1);
    if (qt == first || !kHoldFragments<D>) {
      load_a<D, 1>(kf, k_tile, warp * 16);
      load_a<D, 1>(vf, v_tile, warp * 16);
    }
    // Sᵀ's element (key, query) is the draw's (query, key).
    auto dropped_at = [&](int n, int e) {
      return probability_index(p.tokens, qt * kRows + fragment_col(n, e), key0 + fragment_row(e));
    };
    const float* lse2 = row_stats + buf * 2 * kRows;
    const float* delta = lse2 + kRows;
    float s[1][kRows / 8][4], dp[1][kRows / 8][4];
    scores<D, 1, kRows>(s, kf, q_tile(buf), 0);  // Sᵀ: keys × queries
    // Pᵀ; tiles that reach below the diagonal need the causal mask, and keys past T (zeros,
    // whose probability exp(-lse) could overflow) are hidden too.
    const bool edge = (p.causal && qt * kRows < k0 + kTile) || k0 + kTile > p.tokens;
#pragma unroll
    for (int n = 0; n < kRows / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + fragment_row(e), local = fragment_col(n, e);
        const bool hidden = edge && (key >= p.tokens || (p.causal && key > qt * kRows + local));
        s[0][n][e] = hidden ? 0.0f : exp2_approx(fmaf(s[0][n][e], p.scale_log2, -lse2[local]));
        dp[0][n][e] = s[0][n][e];  // P, kept for dS; s may become the dropped probability
      }
    if constexpr (kDropout) apply_dropout(s[0], p, dropped_at);
    accumulate<D, 1, kRows>(dv, s, do_tile(buf), 0);
    // dp holds P; s is free for dPᵀ = V·dOᵀ.
    scores<D, 1, kRows>(s, vf, do_tile(buf), 0);
    if constexpr (kDropout) apply_dropout(s[0], p, dropped_at);
#pragma unroll
    for (int n = 0; n < kRows / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][n][e] = dp[0][n][e] * (s[0][n][e] - delta[fragment_col(n, e)]);  // dSᵀ
      // Parked in bf16, as the dK product's A operand rounds it, for the block's dS·K.
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<uint32_t*>(ds_tile.at(warp * 16 + fragment_row(2 * half), n) + fragment_col(0, 0)) =
            mma::pack_bf16(s[0][n][2 * half], s[0][n][2 * half + 1]);
    }
    accumulate<D, 1, kRows>(dk, s, q_tile(buf), 0);
    __syncthreads();  // every warp's rows of dSᵀ are in place
    {
      float dq[8][4];
      ds_times_k<D, kRows>(dq, ds_tile, k_tile);
      stage_dq_share<D>(staged_share(qt), dq);
    }
    __syncthreads();  // the share is staged, and every warp is done with this step's buffers
  }
  if (threadIdx.x == 0) {  // the last share; the bulk copies must finish before the block ends
    shares.complete();
    shares.peek(query_tiles - 1);
    issue_share(query_tiles - 1);
    shares.complete();
  }
  store_rows<D>(p.dk + in_base, p.in.token, key0, p.tokens, dk[0], p.scale, p.scale);
  store_rows<D>(p.dv + in_base, p.in.token, key0, p.tokens, dv[0], 1.0f, 1.0f);
}

template <class Kernel>
void launch(Kernel kernel, dim3 grid, size_t smem, const Params& params, const char* name) {
  if (smem > 48 * 1024)
    FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  launch_dependent(kernel, grid, kAttnThreads, smem, params);
  FT_CUDA_CHECK_LAUNCH(name);
}

Params make_params(const AttentionShape& shape, bool causal, double dropout_p, uint64_t seed, const Tensor& offset) {
  Params p{};
  p.heads = static_cast<int>(shape.heads);
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

dim3 grid_for(const AttentionShape& shape, int rows_per_block) {
  return dim3(static_cast<unsigned>((shape.tokens + rows_per_block - 1) / rows_per_block),
              static_cast<unsigned>(shape.batch * shape.heads));
}

}  // namespace

int flash::forward_block_group(const AttentionShape& shape, bool causal, int64_t query_tiles, int64_t resident) {
  if (!causal) return 1;
  const int64_t head_count = shape.batch * shape.heads;
  const int64_t head_bytes = shape.tokens * shape.head_size * 2 * static_cast<int64_t>(sizeof(bf16));
  const int64_t max_group = std::clamp<int64_t>(l2_cache_bytes() / 4 / head_bytes, 1, head_count);
  return causal_group(static_cast<int>(query_tiles), static_cast<int>(head_count), static_cast<int>(resident),
                      static_cast<int>(max_group));
}

bool attention_supported(int64_t head_size) { return head_size == 64 || head_size == 128; }

namespace {
FlashKernels flash_kernels_choice = FlashKernels::PreferHopper;
}  // namespace

void set_flash_kernels(FlashKernels choice) { flash_kernels_choice = choice; }
FlashKernels flash_kernels() { return flash_kernels_choice; }

namespace {
/// Whether the Hopper kernels may run (chosen, built and on an sm_90 device); each direction
/// then asks whether it takes the shape and the tensors.
bool prefer_hopper() { return flash_kernels_choice == FlashKernels::PreferHopper && hopper_flash_available(); }
}  // namespace

void attention_forward(const AttentionShape& shape, const AttentionInputs& in, void* out, HeadStrides out_strides,
                       const Tensor& lse, bool causal, double dropout_p, uint64_t seed, const Tensor& offset) {
  Params p = make_params(shape, causal, dropout_p, seed, offset);
  p.q = static_cast<const bf16*>(in.q);
  p.k = static_cast<const bf16*>(in.k);
  p.v = static_cast<const bf16*>(in.v);
  p.in = in.strides;
  p.out = static_cast<bf16*>(out);
  p.out_strides = out_strides;
  p.lse = lse.data<float>();
  if (prefer_hopper() && hopper_forward_takes(in, shape))
    return attention_forward_hopper(p, shape, in);
  with_head_size_and_dropout(shape.head_size, dropout_p > 0.0, [&](auto d, auto dropout) {
    constexpr int D = decltype(d)::value;
    constexpr bool kDropout = decltype(dropout)::value;
    const auto kernel = attention_forward_kernel<D, kDropout>;
    constexpr int kSmem = (kForwardRows<D> + 4 * kTile) * D * sizeof(bf16);
    // Once per kernel, not per step: the shared-memory opt-in and the blocks a multiprocessor holds.
    static const int per_multiprocessor = [&] {
      FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
      int blocks = 1;
      FT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kAttnThreads, kSmem));
      return std::max(blocks, 1);
    }();
    const int64_t query_tiles = (shape.tokens + kForwardRows<D> - 1) / kForwardRows<D>;
    const int group =
        forward_block_group(shape, causal, query_tiles, int64_t{per_multiprocessor} * multiprocessor_count());
    launch_dependent(kernel, static_cast<unsigned>(query_tiles * shape.batch * shape.heads), kAttnThreads, kSmem, p,
                     group);
    FT_CUDA_CHECK_LAUNCH("attention_forward_kernel");
  });
}

int64_t qkv_bias_partial_rows(const AttentionShape& shape) {
  return shape.batch * ((shape.tokens + kQkvBiasRows - 1) / kQkvBiasRows);
}

bool attention_backward(const AttentionShape& shape, const AttentionInputs& in, const void* out, const void* dout,
                        HeadStrides out_strides, const Tensor& lse, const AttentionGrads& grads, bool causal,
                        double dropout_p, uint64_t seed, const Tensor& offset) {
  Params p = make_params(shape, causal, dropout_p, seed, offset);
  p.q = static_cast<const bf16*>(in.q);
  p.k = static_cast<const bf16*>(in.k);
  p.v = static_cast<const bf16*>(in.v);
  p.in = in.strides;
  p.o = static_cast<const bf16*>(out);
  p.dout = static_cast<const bf16*>(dout);
  p.out_strides = out_strides;
  p.lse = lse.data<float>();
  p.dq = static_cast<bf16*>(grads.dq);
  p.dk = static_cast<bf16*>(grads.dk);
  p.dv = static_cast<bf16*>(grads.dv);
  const bool hopper = prefer_hopper() && hopper_backward_takes(in, dout, out_strides, shape);
  // The delta kernel's K and V parts hold only without dropout (the kept probabilities of a row
  // do not sum to 1).
  p.qkv_bias_partials = dropout_p == 0.0 ? grads.qkv_bias_partials : nullptr;
  // The Hopper backward copies a query tile's row statistics with one bulk copy: tiles of
  // kStatTileRows rows, padded.
  const int64_t padded_tokens =
      hopper ? (shape.tokens + kStatTileRows - 1) / kStatTileRows * kStatTileRows : shape.tokens;
  const int64_t rows = shape.batch * shape.heads * padded_tokens;
  Tensor stats = Tensor::empty({hopper ? 2 * rows : rows}, DType::F32, lse.device());
  (hopper ? p.row_stats : p.delta) = stats.data<float>();
  with_head_size_and_dropout(shape.head_size, dropout_p > 0.0, [&](auto d, auto dropout) {
    constexpr int D = decltype(d)::value;
    constexpr bool kDropout = decltype(dropout)::value;
    // Chunks of the padded rows, as many as of the tokens: padding is under kStatTileRows.
    const dim3 delta_grid(static_cast<unsigned>((padded_tokens + kQkvBiasRows - 1) / kQkvBiasRows),
                          static_cast<unsigned>(shape.batch * shape.heads));
    launch_dependent(attention_delta_kernel<D>, delta_grid, kAttnThreads, 0, p, static_cast<int>(padded_tokens));
    FT_CUDA_CHECK_LAUNCH("attention_delta_kernel");
    // The dQ shares' f32 sums and turn counters, per head and query tile (a step's rows); the
    // sums need no clearing (the first share is stored), the counters start at zero.
    auto with_share_rows = [&](auto rows_constant) {
      constexpr int kRows = decltype(rows_constant)::value;
      const int64_t slots = shape.batch * shape.heads * ((shape.tokens + kRows - 1) / kRows);
      Tensor dq_sum = Tensor::empty({slots * int64_t{kDqShareFloats<D, kRows>}}, DType::F32, lse.device());
      Tensor dq_turns = Tensor::empty({slots}, DType::I32, lse.device());
      FT_CUDA_CHECK(cudaMemsetAsync(dq_turns.data_ptr(), 0, dq_turns.nbytes(), stream()));
      p.dq_sum = dq_sum.data<float>();
      before_untracked_write(p.dq_sum, dq_sum.nbytes());  // only bulk copies write the dQ sums
      p.dq_turns = dq_turns.data<int32_t>();
      if (hopper) {
        attention_backward_hopper(p, shape, in, dout, out_strides);
      } else {
        constexpr int kSyncRows = kBackwardQueryRows<D>;
        const size_t smem = (2 * kTile * D + 4 * kSyncRows * D + kTile * kSyncRows) * sizeof(bf16) +
                            (4 * kSyncRows + 2 * kDqShareFloats<D>) * sizeof(float);
        launch(attention_backward_kernel<D, kDropout>, grid_for(shape, kTile), smem, p, "attention_backward_kernel");
      }
      const dim3 finish_grid(static_cast<unsigned>((shape.tokens + kQkvBiasRows - 1) / kQkvBiasRows),
                             static_cast<unsigned>(shape.batch * shape.heads));
      launch_dependent(attention_dq_finish_kernel<D, kRows>, finish_grid, kAttnThreads, 0, p,
                       hopper ? kHopperBackwardKeys : kTile);
      FT_CUDA_CHECK_LAUNCH("attention_dq_finish_kernel");
    };
    if (hopper) with_share_rows(std::integral_constant<int, kHopperBackwardQueryRows>{});
    else with_share_rows(std::integral_constant<int, kBackwardQueryRows<D>>{});
  });
  return p.qkv_bias_partials != nullptr;
}

}  // namespace ft::cuda
