// Flash attention backward on Hopper (sm_90a) at HS 64 and 128: the mma.sync backward's algorithm
// (lib/ops/attention/attention_backward.cu: a block owns a key tile and streams the query tiles, recomputing the
// probabilities from the saved log-sum-exp; dQ through the ordered shares of attention_dq.cuh)
// with every product on wgmma and every tile copied by TMA.
// - A block owns 128 keys: two warpgroups of 64 keys (16 a warp). K and V are read once, by
//   TMA. At HS 64 they are kept as A fragments in registers: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ are
//   register-A products whose only shared-memory operand is the query tile (an m64n64 product
//   with both operands in shared memory reads 128 bytes a clock, all of what shared memory
//   gives). At HS 128 the fragments would take 64 registers beside the 128 of the dK and dV
//   accumulators, so those two products read K and V from shared memory (as FlashAttention-3's
//   HS 128 backward does).
// - Each step TMA brings a query tile of Q and dO (64 rows, straight out of the fused QKV output
//   and the output gradient) and one bulk copy its 64 log-sum-exps and Δs, shared by both
//   warpgroups; two stages, thread 0 refills a stage once the block is done with it.
// - Pᵀ and dSᵀ come out of the products as accumulators, which are already the A fragments of
//   dV += Pᵀ·dO and dK += dSᵀ·Q (Q and dO MN-major). dSᵀ is also parked in shared memory,
//   swizzled as TMA would, and the block's share of dQ, dS·K over all 128 keys (both operands
//   MN-major), is one warpgroup's product, the two taking turns by step.
// - The products of a step are issued back to back and waited for as late as each result is
//   needed: dPᵀ runs while Pᵀ is computed, dV while dSᵀ is.
// - A share is added by the warpgroup that staged it, in the next step while the other
//   warpgroup computes dS·K, so that a wait for its turn holds no product; that warpgroup's
//   leader completes the copy at the start of the step after.
// - grouped-query attention: a block owns 128 keys of one key/value head and streams the query
//   tiles of each query head of its group in turn (steps over heads and tiles, one pipeline).
// Blocks of 128 keys (two warpgroups), not 64: they halve the dQ shares, whose ordered bulk adds
// were the largest cost, and the query tiles' copies (docs/history/performance-log.md).
#include <cuda.h>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/runtime.h"
#include "lib/cuda/tensor_map.h"
#include "lib/cuda/tma.cuh"
#include "lib/cuda/wgmma.cuh"
#include "lib/ops/attention/attention_dq.cuh"
#include "lib/ops/attention/attention_hopper.h"
#include "lib/ops/attention/attention_tile.cuh"
#include "lib/cuda/swizzled_tile.cuh"

namespace ft::cuda {

namespace {

using namespace flash;
using wgmma::Major;

constexpr int kWarpgroupKeys = 64;                   // keys of a warpgroup, 16 a warp
constexpr int kWarpgroups = 2;                       // a block's: 128 keys
constexpr int kKeys = kWarpgroupKeys * kWarpgroups;
static_assert(kKeys == kHopperBackwardKeys, "the finish kernel counts the shares by kHopperBackwardKeys");
constexpr int kQueries = kHopperBackwardQueryRows;   // query rows a step
static_assert(kQueries == kStatTileRows && kQueries == 64, "a step's statistics are one tile");
constexpr uint32_t kStatBytes = 2 * kStatTileRows * sizeof(float);
using swizzled::k_major_slice;
using swizzled::load_rows;
using swizzled::mn_major_slice;

// Query tiles in flight: 3 measured the same as 2 (the copies are not what a step waits for).
constexpr int kStages = 2;

/// Whether a warp keeps its 16 keys of K and V in registers as A fragments for the whole loop
/// (HS 64: 32 registers), or the products read them from shared memory each step (HS 128,
/// where they would take 64 registers beside the 128 of dK and dV).
template <int D>
constexpr bool kKeysInRegisters = D == 64;

/// Shared memory, tiles 1024-aligned (TMA's swizzle and the descriptors assume it), each stored
/// as D / 64 blocks of rows × 128 bytes: K, V, the stages' Q, dO and row statistics, dSᵀ, two
/// staged dQ shares (alternate steps), barriers.
template <int D>
struct Layout {
  static constexpr uint32_t kKeyTileBytes = kKeys * D * 2, kQueryTileBytes = kQueries * D * 2,
                            kDsBytes = kKeys * kQueries * 2;
  static constexpr uint32_t kShareBytes = kDqShareFloats<D, kQueries> * sizeof(float);
  static constexpr uint32_t kK = 0, kV = kK + kKeyTileBytes, kQ = kV + kKeyTileBytes,
                            kDout = kQ + kStages * kQueryTileBytes, kDs = kDout + kStages * kQueryTileBytes,
                            kStats = kDs + kDsBytes, kShares = kStats + kStages * kStatBytes,
                            kBarriers = kShares + 2 * kShareBytes;
  static constexpr size_t kBytes = kBarriers + (1 + kStages) * sizeof(uint64_t) + 1024;  // + slack for the alignment
  static_assert(kStats % 1024 == 0 && kBytes <= 227 * 1024, "tiles 1024-aligned, within an SM's shared memory");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the helpers of the kernel body below
/// A query-indexed row statistic (lse·log2(e) or Δ) for the thread's accumulator columns of a
/// keys × queries tile: the pairs 8n + 2·(lane % 4) + {0, 1}, read as pairs.
__device__ __forceinline__ void read_query_pairs(float2 (&pairs)[8], const float* statistic) {
#pragma unroll
  for (int n = 0; n < 8; ++n) pairs[n] = *reinterpret_cast<const float2*>(statistic + fragment_col(n, 0));
}
__device__ __forceinline__ float pair_element(const float2& pair, int e) { return e % 2 ? pair.y : pair.x; }

/// The warp's accumulators of a keys × queries tile as the A fragments of the next product.
__device__ __forceinline__ void to_operand(uint32_t (&a)[4][4], const float (&c)[8][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) mma::accumulator_to_a(a[k], c[2 * k], c[2 * k + 1]);
}
#endif

template <int D, bool kDropout>
__global__ void __launch_bounds__(128 * kWarpgroups, 1)
    attention_backward_hopper_kernel(const __grid_constant__ Params p, const __grid_constant__ CUtensorMap q_map,
                                     const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                                     const __grid_constant__ CUtensorMap dout_map) {
  begin_dependent_kernel();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<D>;
  extern __shared__ unsigned char raw_smem[];
  unsigned char* const smem = tma::align_1024(raw_smem);
  uint64_t* const keys_full = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  uint64_t* const step_full = keys_full + 1;
  unsigned char* const ds_tile = smem + L::kDs;  // dSᵀ of the step, keys × queries
  // Key tiles in reverse block order: a block waits for its dQ turn only on blocks of lower index.
  const int key_tiles = gridDim.x, kt = key_tiles - 1 - blockIdx.x, k0 = kt * kKeys;
  const GroupSteps step(p, p.causal ? k0 / kQueries : 0, (p.tokens + kQueries - 1) / kQueries);
  const int batch = step.pair0 / p.heads, kv_head = step.pair0 % p.heads / p.group;
  auto stage_of = [&](int i) { return i % kStages; };
  auto parity_of = [&](int i) { return static_cast<unsigned>(i / kStages) & 1; };
  auto load_step = [&](int i) {  // one thread
    const int s = stage_of(i), qt = step.tile(i), bh = step.pair(i), head = bh % p.heads;
    const float* const stats = p.row_stats + (static_cast<int64_t>(bh) * step.query_tiles + qt) * 2 * kStatTileRows;
    tma::arrive_expecting(step_full + s, 2 * L::kQueryTileBytes + kStatBytes);
    load_rows<D>(smem + L::kQ + s * L::kQueryTileBytes, q_map, step_full + s, kQueries, qt * kQueries, head, batch);
    load_rows<D>(smem + L::kDout + s * L::kQueryTileBytes, dout_map, step_full + s, kQueries, qt * kQueries, head,
                 batch);
    tma::load_bulk(smem + L::kStats + s * kStatBytes, stats, kStatBytes, step_full + s);
  };
  if (threadIdx.x == 0) {
    tma::init_barrier(keys_full, 1);
    for (int s = 0; s < kStages; ++s) tma::init_barrier(step_full + s, 1);
    tma::fence_barrier_init();
    tma::prefetch_map(q_map);
    tma::prefetch_map(k_map);
    tma::prefetch_map(v_map);
    tma::prefetch_map(dout_map);
    tma::arrive_expecting(keys_full, 2 * L::kKeyTileBytes);
    load_rows<D>(smem + L::kK, k_map, keys_full, kKeys, k0, kv_head, batch);
    load_rows<D>(smem + L::kV, v_map, keys_full, kKeys, k0, kv_head, batch);
    for (int i = 0; i < min(kStages, step.steps); ++i) load_step(i);
  }
  __syncthreads();

  DqShares shares{p.dq_sum + static_cast<int64_t>(step.pair0) * step.query_tiles * kDqShareFloats<D, kQueries>,
                  p.dq_turns + static_cast<int64_t>(step.pair0) * step.query_tiles};
  float* const staged_shares = reinterpret_cast<float*>(smem + L::kShares);
  auto staged_share = [&](int i) { return staged_shares + (i & 1) * kDqShareFloats<D, kQueries>; };
  auto issue_share = [&](int i) {  // a warpgroup leader
    const int turn = dq_share_count(step.tile(i), kQueries, kKeys, p.tokens, p.causal) - 1 - kt;
    shares.issue(staged_share(i), step.slot(i), turn, kDqShareFloats<D, kQueries>);
  };

  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int row0 = kWarpgroupKeys * warpgroup + 16 * warp, key0 = k0 + row0;  // the warp's first key
  uint32_t kf[4][4], vf[4][4];  // HS 64: the warp's 16 keys of K and V as A fragments, 16 columns each
  tma::wait(keys_full, 0);
  if constexpr (kKeysInRegisters<D>) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t at = swizzled::offset(row0 + lane % 16, 2 * k + lane / 16);
      mma::load_matrix_x4(kf[k], smem + L::kK + at);
      mma::load_matrix_x4(vf[k], smem + L::kV + at);
    }
  }
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  for (int i = 0; i < step.steps; ++i) {
    const int s = stage_of(i), qt = step.tile(i), bh = step.pair(i);
    const unsigned char* const q = smem + L::kQ + s * L::kQueryTileBytes;
    const unsigned char* const dout = smem + L::kDout + s * L::kQueryTileBytes;
    const float* const lse2 = reinterpret_cast<const float*>(smem + L::kStats + s * kStatBytes);
    const float* const delta = lse2 + kStatTileRows;
    // The leader of the warpgroup that computes this step's dQ share completes the share it
    // issued last step (the buffer is staged in again at this step's end); the other leader
    // reads the turn counter of the share it issues this step.
    const bool leader = threadIdx.x % 128 == 0, dq_turn = warpgroup == i % kWarpgroups;
    if (leader) {
      if (dq_turn) shares.complete();
      else if (i > 0) shares.peek(step.slot(i - 1));
    }
    tma::wait(step_full + s, parity_of(i));
    float st[8][4], dpt[8][4];  // Sᵀ, then Pᵀ; dPᵀ, then dSᵀ: keys × queries
    wgmma::fence();
    if constexpr (kKeysInRegisters<D>) {
#pragma unroll
      for (int k = 0; k < 4; ++k) wgmma::mma_rs<Major::K>(st, kf[k], k_major_slice<kQueries>(q, 0, k), k > 0);
      wgmma::commit();
#pragma unroll
      for (int k = 0; k < 4; ++k) wgmma::mma_rs<Major::K>(dpt, vf[k], k_major_slice<kQueries>(dout, 0, k), k > 0);
      wgmma::commit();
    } else {
      const int wg_row0 = kWarpgroupKeys * warpgroup;
#pragma unroll
      for (int k = 0; k < D / 16; ++k)
        wgmma::mma_ss(st, k_major_slice<kKeys>(smem + L::kK, wg_row0, k), k_major_slice<kQueries>(q, 0, k), k > 0);
      wgmma::commit();
#pragma unroll
      for (int k = 0; k < D / 16; ++k)
        wgmma::mma_ss(dpt, k_major_slice<kKeys>(smem + L::kV, wg_row0, k), k_major_slice<kQueries>(dout, 0, k), k > 0);
      wgmma::commit();
    }

    // Sᵀ's element (key, query) is the draw's (query, key).
    auto dropped_at = [&](int n, int e) {
      return probability_index(p.tokens, bh, qt * kQueries + fragment_col(n, e), key0 + fragment_row(e));
    };
    wgmma::wait<1>();
    wgmma::pin(st);
    // Pᵀ, computed for every element; tiles on the causal diagonal or reaching past T then hide
    // the keys after the query and past T (zeros, whose probability exp(-lse) could overflow).
    float2 query_stat[8];
    read_query_pairs(query_stat, lse2);
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[n][e] = exp2_approx(fmaf(st[n][e], p.scale_log2, -pair_element(query_stat[n], e)));
    const int wg_k0 = k0 + kWarpgroupKeys * warpgroup;
    if ((p.causal && qt * kQueries < wg_k0 + kWarpgroupKeys) || wg_k0 + kWarpgroupKeys > p.tokens) {
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + fragment_row(e), query = qt * kQueries + fragment_col(n, e);
          if (key >= p.tokens || (p.causal && key > query)) st[n][e] = 0.0f;
        }
    }
    uint32_t pa[4][4];  // Pᵀ after dropout, the A operand of dV += Pᵀ·dO
    if constexpr (kDropout) {
      float kept[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) kept[n][e] = st[n][e];
      apply_dropout(kept, p, dropped_at);
      to_operand(pa, kept);
    } else {
      to_operand(pa, st);
    }
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) wgmma::mma_rs<Major::MN>(dv, pa[k], mn_major_slice<kQueries>(dout, k), true);
    wgmma::commit();

    wgmma::wait<1>();
    wgmma::pin(dpt);
    if constexpr (kDropout) apply_dropout(dpt, p, dropped_at);
    read_query_pairs(query_stat, delta);
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[n][e] = st[n][e] * (dpt[n][e] - pair_element(query_stat[n], e));  // dSᵀ
    uint32_t da[4][4];  // dSᵀ in bf16: the A operand of dK += dSᵀ·Q, and parked for dS·K
    to_operand(da, dpt);
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // fragment register j: column block 2k + j / 2, rows + 8·(j % 2)
        const int row = row0 + lane / 4 + 8 * (j % 2);
        *reinterpret_cast<uint32_t*>(ds_tile + swizzled::offset(row, 2 * k + j / 2) + (lane % 4) * 4) = da[k][j];
      }
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) wgmma::mma_rs<Major::MN>(dk, da[k], mn_major_slice<kQueries>(q, k), true);
    wgmma::commit();
    mma::fence_shared_for_bulk();  // the dSᵀ stores, before the tensor cores read them
    __syncthreads();               // every warp's keys of dSᵀ are in place
    if (dq_turn) {  // the warpgroups take turns at the block's dQ share
      float dq[D / 8][4];  // this key tile's share of the query tile's dQ, dS·K
      wgmma::fence();
#pragma unroll
      for (int k = 0; k < kKeys / 16; ++k)
        wgmma::mma_ss<Major::MN, Major::MN>(dq, mn_major_slice<kKeys>(ds_tile, k), mn_major_slice<kKeys>(smem + L::kK, k),
                                            k > 0);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::pin(dq);
      stage_dq_share<D, kQueries>(staged_share(i), dq);
    } else {
      wgmma::wait<0>();
      // The share this warpgroup staged last step, issued while the other one computes dS·K:
      // a wait for its turn here holds no product (thread 0 waiting early in the step held
      // its warpgroup's next product, and the block with it).
      if (leader && i > 0) issue_share(i - 1);
    }
    wgmma::pin(dk);
    wgmma::pin(dv);
    __syncthreads();  // the share is staged; the stage's tiles and dSᵀ are free
    if (threadIdx.x == 0 && i + kStages < step.steps) load_step(i + kStages);
  }
  if (threadIdx.x % 128 == 0) {  // the last share; the bulk copies must finish before the block ends
    shares.complete();
    if (warpgroup == (step.steps - 1) % kWarpgroups) {
      shares.peek(step.slot(step.steps - 1));
      issue_share(step.steps - 1);
      shares.complete();
    }
  }
  const int64_t kv_base = block_kv_offset(p);
  store_rows<D>(p.dk + kv_base, p.kv.token, key0, p.tokens, dk, p.scale, p.scale);
  store_rows<D>(p.dv + kv_base, p.kv.token, key0, p.tokens, dv, 1.0f, 1.0f);
#else
  __trap();  // dispatched only on sm_90 (hopper_flash_supported)
#endif
}

}  // namespace

bool hopper_backward_takes(const AttentionInputs& in, const void* dout, const HeadStrides& out_strides,
                           const AttentionShape& shape) {
  return (shape.head_size == 64 || shape.head_size == 128) && hopper_forward_takes(in, shape) &&
         tensor_map_possible(head_rows_map(dout, shape, out_strides, kQueries));
}

void attention_backward_hopper(const Params& params, const AttentionShape& shape, const AttentionInputs& in,
                               const void* dout, const HeadStrides& out_strides) {
  const CUtensorMap q_map = encode_tensor_map(head_rows_map(in.q, shape, in.strides, kQueries));
  const CUtensorMap k_map = encode_tensor_map(head_rows_map(in.k, key_value_shape(shape), in.kv_strides, kKeys));
  const CUtensorMap v_map = encode_tensor_map(head_rows_map(in.v, key_value_shape(shape), in.kv_strides, kKeys));
  const CUtensorMap dout_map = encode_tensor_map(head_rows_map(dout, shape, out_strides, kQueries));
  const dim3 grid = backward_grid(shape, kKeys);
  with_head_size_and_dropout(shape.head_size, params.dropout_p > 0.0f, [&](auto d, auto dropout) {
    constexpr int D = decltype(d)::value;
    const auto kernel = attention_backward_hopper_kernel<D, decltype(dropout)::value>;
    constexpr size_t kSmem = Layout<D>::kBytes;
    FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    launch_dependent(kernel, grid, 128 * kWarpgroups, kSmem, params, q_map, k_map, v_map, dout_map);
    FT_CUDA_CHECK_LAUNCH("attention_backward_hopper_kernel");
  });
}

}  // namespace ft::cuda
