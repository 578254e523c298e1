// Flash attention's backward on the tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate), after
// FlashAttention-2 (Dao, 2023); attention_forward.cu is the forward and says what it saves.
//
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
// - grouped-query attention: a block owns a key tile of one key/value head and streams the
//   query tiles of every query head of its group, one head after the other, adding their dK and
//   dV in its registers; the dQ shares are per query head as without groups.
// - dropout on the probabilities: element (b, h, i, j) is kept when
//   philox::dropout_uniform(seed, offset, ((b·NH + h)·T + i)·T + j) >= p, exactly the twin's draw; the
//   backward regenerates it.
//
// Every product is one of two shapes (scores: A·Bᵀ, A as fragments in registers and B row-major
// in shared memory; accumulate: C += P·B with P in registers), plus dS·K with both operands in
// shared memory. Measured speed: docs/benchmarks.md.
#include <cuda_bf16.h>

#include <algorithm>

#include "lib/ops/attention/attention_dq.cuh"
#include "lib/ops/attention/attention_hopper.h"
#include "lib/ops/attention/attention_mma.cuh"

namespace ft::cuda {

namespace {

using namespace flash;

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
/// (blockIdx.y = b·NH + h): D / 8 lanes a row, each reading 16 bytes of O and dO (a warp a row,
/// 4 bytes a lane, reached half the bandwidth), its row lanes taking every kRowLanes-th row. Into p.delta ([B·NH, T]), or, for the
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
  const int64_t kv_base = block_kv_offset(p);
  const int query_tiles = (p.tokens + kRows - 1) / kRows;
  const GroupSteps step(p, p.causal ? k0 / kRows : 0, query_tiles);
  DqShares shares{p.dq_sum + static_cast<int64_t>(step.pair0) * query_tiles * kDqShareFloats<D>,
                  p.dq_turns + static_cast<int64_t>(step.pair0) * query_tiles};
  auto load_queries = [&](int i, int buf) {
    const int qt = step.tile(i), bh = step.pair(i);
    const int64_t stat_base = static_cast<int64_t>(bh) * p.tokens;
    load_tile<D, kRows>(q_tile(buf), p.q + head_offset(p.in, p.heads, bh), p.in.token, qt * kRows, p.tokens);
    load_tile<D, kRows>(do_tile(buf), p.dout + head_offset(p.out_strides, p.heads, bh), p.out_strides.token,
                        qt * kRows, p.tokens);
    for (int r = threadIdx.x; r < kRows; r += kAttnThreads) {
      const int row = qt * kRows + r;
      // A query past T gets an infinite log-sum-exp: probability 0 everywhere.
      row_stats[buf * 2 * kRows + r] = row < p.tokens ? p.lse[stat_base + row] * kLog2e : INFINITY;
      row_stats[buf * 2 * kRows + kRows + r] = row < p.tokens ? p.delta[stat_base + row] : 0.0f;
    }
  };
  load_key_values<D>(k_tile, v_tile, p, kv_base, k0);
  load_queries(0, 0);
  mma::commit_copies();

  const int key0 = k0 + warp * 16;  // the warp's first key (rows of Sᵀ)
  uint32_t kf[1][D / 16][4], vf[1][D / 16][4];
  float dk[1][D / 8][4] = {}, dv[1][D / 8][4] = {};
  auto staged_share = [&](int i) { return dq_stage + (i & 1) * kDqShareFloats<D>; };
  auto issue_share = [&](int i) {  // thread 0
    const int turn = dq_share_count(step.tile(i), kRows, kTile, p.tokens, p.causal) - 1 - kt;
    shares.issue(staged_share(i), step.slot(i), turn, kDqShareFloats<D>);
  };
  for (int i = 0; i < step.steps; ++i) {
    const int buf = i & 1, qt = step.tile(i), bh = step.pair(i);
    if (threadIdx.x == 0) {
      shares.complete();
      if (i > 0) shares.peek(step.slot(i - 1));
    }
    advance_stage(i + 1 < step.steps, [&] { load_queries(i + 1, buf ^ 1); });
    if (threadIdx.x == 0 && i > 0) issue_share(i - 1);
    if (i == 0 || !kHoldFragments<D>) {
      load_a<D, 1>(kf, k_tile, warp * 16);
      load_a<D, 1>(vf, v_tile, warp * 16);
    }
    // Sᵀ's element (key, query) is the draw's (query, key).
    auto dropped_at = [&](int n, int e) {
      return probability_index(p.tokens, bh, qt * kRows + fragment_col(n, e), key0 + fragment_row(e));
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
      stage_dq_share<D>(staged_share(i), dq);
    }
    __syncthreads();  // the share is staged, and every warp is done with this step's buffers
  }
  if (threadIdx.x == 0) {  // the last share; the bulk copies must finish before the block ends
    shares.complete();
    shares.peek(step.slot(step.steps - 1));
    issue_share(step.steps - 1);
    shares.complete();
  }
  store_rows<D>(p.dk + kv_base, p.kv.token, key0, p.tokens, dk[0], p.scale, p.scale);
  store_rows<D>(p.dv + kv_base, p.kv.token, key0, p.tokens, dv[0], 1.0f, 1.0f);
}

}  // namespace

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
  p.kv = in.kv_strides;
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
  FT_CHECK(grads.qkv_bias_partials == nullptr || shape.group() == 1,
           "attention backward: the QKV bias sums assume one key head a query head");
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
        launch(attention_backward_kernel<D, kDropout>, backward_grid(shape, kTile), smem, p,
               "attention_backward_kernel");
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
