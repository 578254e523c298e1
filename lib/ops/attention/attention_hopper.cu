// Flash attention forward on Hopper (sm_90a), after FlashAttention-3 (Shah et al., 2024): the
// same algorithm as the mma.sync kernel (lib/ops/attention/attention_forward.cu: online softmax in registers,
// Philox dropout on the probabilities, the output and the log-sum-exp saved), on Hopper's
// asynchronous units:
// - TMA copies the tiles of Q, K and V straight out of their tensors (the fused QKV output or
//   [B, NH, T, HS]) into 128-byte-swizzled shared memory, rows past T zero-filled, through a
//   ring of two K/V stages with an mbarrier each for "the copy has landed". No thread waits on
//   memory to refill a stage: the last warp to be done with it issues the next copy (a shared
//   counter per stage), so the copy of tile j + 1 runs while tile j is computed.
// - two warpgroups of 64 query rows each do S = Q·Kᵀ as wgmma with both operands in shared
//   memory, the mask and online softmax (and dropout) on the accumulators, and O += P·V as wgmma
//   with P from registers (the probability accumulators are already its A fragments) and V read
//   N-major.
// - two blocks a multiprocessor (at most 128 registers a thread): four warpgroups, so one's
//   softmax runs while another's products do. That beat FlashAttention-3's intra-warpgroup
//   overlap (tile j's scores issued before tile j - 1's P·V), whose second score tile needs more
//   registers than two blocks leave, and its producer warpgroup (setmaxnreg did not lift
//   ptxas's 168-register cap for 384 threads); the variants tried are in
//   docs/history/performance-log.md.
// Grouped-query attention: a block's query head h reads key/value head h / group's tiles.
// Blocks take 128 query rows against 128-key tiles at HS 64, 64-key tiles at HS 128, on a 1-D
// grid in the order of lib/causal_order.h (the longest blocks of a group of heads first).
// Dispatched from attention_forward when the device is sm_90 and TMA can address the inputs.
#include <cuda.h>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/runtime.h"
#include "lib/cuda/tensor_map.h"
#include "lib/cuda/tma.cuh"
#include "lib/cuda/wgmma.cuh"
#include "lib/ops/attention/attention_hopper.h"
#include "lib/ops/attention/attention_tile.cuh"
#include "lib/cuda/swizzled_tile.cuh"

namespace ft::cuda {

namespace {

using namespace flash;

constexpr int kConsumers = 2;                    // warpgroups of 64 query rows
constexpr int kBlockRows = 64 * kConsumers;      // query rows per block
constexpr int kHopperThreads = 128 * kConsumers;
using swizzled::k_major_slice;
using swizzled::load_rows;

/// Shared memory: Q, then the K stages, then the V stages, each tile stored as D / 64 blocks of
/// rows × 128 bytes (one TMA box each), then the barriers.
constexpr int kStages = 2;  // K/V tiles in the ring

/// Keys per streamed tile: 64 at HS 128 keeps the 64 output accumulators, the scores and the
/// probabilities of a thread within 128 registers.
template <int D>
constexpr int kKeysPerTile = D == 64 ? 128 : 64;

template <int D, int kKeys>
struct Smem {
  static constexpr uint32_t kQBytes = kBlockRows * D * 2, kTileBytes = kKeys * D * 2;
  static constexpr uint32_t kK = kQBytes, kV = kK + kStages * kTileBytes, kBarriers = kV + kStages * kTileBytes;
  // The barriers (Q; K and V per stage), the stages' release counters, and slack to align to 1024.
  static constexpr size_t kBytes = kBarriers + (1 + 2 * kStages) * 8 + kStages * 4 + 1024;
};

// Two blocks a multiprocessor cap a thread at 128 registers; the dropout draw needs more (it
// spilled hundreds of bytes), so with dropout one block takes a multiprocessor.
template <bool kDropout>
constexpr int kBlocksPerMultiprocessor = kDropout ? 1 : 2;

template <int D, bool kDropout>
__global__ void __launch_bounds__(kHopperThreads, kBlocksPerMultiprocessor<kDropout>)
    attention_forward_hopper_kernel(const __grid_constant__ Params p, const __grid_constant__ CUtensorMap q_map,
                                    const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                                    int group) {
  begin_dependent_kernel();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kKeys = kKeysPerTile<D>;
  using S = Smem<D, kKeys>;
  extern __shared__ unsigned char raw_smem[];
  unsigned char* const smem = tma::align_1024(raw_smem);
  uint64_t* const q_full = reinterpret_cast<uint64_t*>(smem + S::kBarriers);
  uint64_t* const k_full = q_full + 1;
  uint64_t* const v_full = k_full + kStages;
  int* const released = reinterpret_cast<int*>(v_full + kStages);  // per stage: warps done with it, all rounds
  const int all_tiles = (p.tokens + kKeys - 1) / kKeys, query_tiles = (p.tokens + kBlockRows - 1) / kBlockRows;
  const CausalTask task = causal_task(blockIdx.x, query_tiles, gridDim.x / query_tiles, group);
  const int q0 = task.query_tile * kBlockRows, head = task.head % p.heads, batch = task.head / p.heads;
  const int kv_head = head / p.group;
  const int key_tiles = p.causal ? min(all_tiles, (q0 + kBlockRows + kKeys - 1) / kKeys) : all_tiles;
  const int warpgroup = threadIdx.x / 128;
  auto stage_of = [](int kt) { return kt % kStages; };
  auto parity_of = [](int kt) { return static_cast<unsigned>(kt / kStages) & 1; };
  auto load_keys_values = [&](int kt) {  // one thread
    const uint32_t at = stage_of(kt) * S::kTileBytes;
    tma::arrive_expecting(k_full + stage_of(kt), S::kTileBytes);
    load_rows<D>(smem + S::kK + at, k_map, k_full + stage_of(kt), kKeys, kt * kKeys, kv_head, batch);
    tma::arrive_expecting(v_full + stage_of(kt), S::kTileBytes);
    load_rows<D>(smem + S::kV + at, v_map, v_full + stage_of(kt), kKeys, kt * kKeys, kv_head, batch);
  };
  if (threadIdx.x == 0) {
    tma::init_barrier(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      tma::init_barrier(k_full + s, 1);
      tma::init_barrier(v_full + s, 1);
      released[s] = 0;
    }
    tma::fence_barrier_init();
    tma::prefetch_map(q_map);
    tma::prefetch_map(k_map);
    tma::prefetch_map(v_map);
    tma::arrive_expecting(q_full, S::kQBytes);
    load_rows<D>(smem, q_map, q_full, kBlockRows, q0, head, batch);
    for (int kt = 0; kt < min(kStages, key_tiles); ++kt) load_keys_values(kt);
  }
  __syncthreads();

  const int warp = threadIdx.x / 32 % 4, row0 = q0 + 64 * warpgroup + 16 * warp;  // the warp's first query row
  // A causal warpgroup stops at its own diagonal: with 64-key tiles the first warpgroup skips
  // the block's last tile, all above its rows. It does not count as done with that stage, which
  // nothing refills.
  const int my_tiles = p.causal ? min(key_tiles, (q0 + 64 * warpgroup + 64 + kKeys - 1) / kKeys) : key_tiles;
  float s[kKeys / 8][4] = {}, acc[D / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, rescale[2];
  uint32_t probs[kKeys / 16][4];
  // Starts S = Q·K_ktᵀ once K_kt has landed.
  auto issue_scores = [&](int kt) {
    const unsigned char* const k_tile = smem + S::kK + stage_of(kt) * S::kTileBytes;
    tma::wait(k_full + stage_of(kt), parity_of(kt));
    wgmma::pin(s);
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      wgmma::mma_ss(s, k_major_slice<kBlockRows>(smem, 64 * warpgroup, k), k_major_slice<kKeys>(k_tile, 0, k), k > 0);
    wgmma::commit();
  };
  // Starts O += P_kt·V_kt once V_kt has landed. V is [keys][D]: N-major for this product, 8-key
  // groups 1024 bytes apart, 64-column blocks a tile of rows apart; 16 keys a product.
  auto issue_values = [&](int kt) {
    const unsigned char* const v_tile = smem + S::kV + stage_of(kt) * S::kTileBytes;
    tma::wait(v_full + stage_of(kt), parity_of(kt));
    wgmma::pin(acc);
    wgmma::pin(probs);
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < kKeys / 16; ++k)
      wgmma::mma_rs<wgmma::Major::MN>(acc, probs[k], swizzled::mn_major_slice<kKeys>(v_tile, k), true);
    wgmma::commit();
  };
  // The scores of tile kt (complete) to probabilities; the output's rescale is left in `rescale`.
  auto softmax = [&](int kt) {
    const int k0 = kt * kKeys;
    if (edge_tile(p, k0, kKeys, row0)) mask_scores(s, p, row0, k0);
    online_softmax_scores(s, row_max, row_sum, rescale, p.scale_log2);
    if constexpr (kDropout)
      apply_dropout(s, p, [&](int n, int e) {
        return probability_index(p.tokens, task.head, row0 + fragment_row(e), k0 + fragment_col(n, e));
      });
  };
  auto to_operand = [&] {
#pragma unroll
    for (int k = 0; k < kKeys / 16; ++k) mma::accumulator_to_a(probs[k], s[2 * k], s[2 * k + 1]);
  };
  // Once P_kt·V_kt is complete, its registers and tile kt's stage are free; the last warp to be
  // done with the stage refills it with tile kt + kStages.
  auto values_done = [&](int kt) {
    wgmma::pin(acc);
    wgmma::pin(probs);
    __syncwarp();
    if (threadIdx.x % 32 == 0 && atomicAdd(released + stage_of(kt), 1) + 1 == (kt / kStages + 1) * 4 * kConsumers &&
        kt + kStages < key_tiles)
      load_keys_values(kt + kStages);
  };

  tma::wait(q_full, 0);
  for (int kt = 0; kt < my_tiles; ++kt) {
    issue_scores(kt);
    wgmma::wait<0>();
    wgmma::pin(s);
    softmax(kt);
    rescale_rows(acc, rescale);
    to_operand();
    issue_values(kt);
    wgmma::wait<0>();
    values_done(kt);
  }
  finish_rows<D>(p, task.head, row0, acc, row_max, row_sum);
#else
  __trap();  // dispatched only on sm_90 (hopper_flash_supported)
#endif
}

}  // namespace

TensorMapRequest head_rows_map(const void* base, const AttentionShape& shape, const HeadStrides& strides, int rows) {
  return TensorMapRequest{base,
                          {shape.head_size, shape.tokens, shape.heads, shape.batch},
                          {strides.token, strides.head, strides.batch},
                          {swizzled::kBoxCols, rows, 1, 1}};
}

bool hopper_flash_supported() {
#if defined(FT_HOPPER_KERNELS)
  return compute_capability() == 90;
#else
  return false;
#endif
}

bool hopper_forward_takes(const AttentionInputs& in, const AttentionShape& shape) {
  if (!tensor_map_possible(head_rows_map(in.q, shape, in.strides, kBlockRows))) return false;
  for (const void* base : {in.k, in.v})
    if (!tensor_map_possible(head_rows_map(base, key_value_shape(shape), in.kv_strides, kBlockRows))) return false;
  return true;
}

void attention_forward_hopper(const Params& params, const AttentionShape& shape, const AttentionInputs& in) {
  const CUtensorMap q_map = encode_tensor_map(head_rows_map(in.q, shape, in.strides, kBlockRows));
  const int64_t query_tiles = (shape.tokens + kBlockRows - 1) / kBlockRows;
  const unsigned grid = static_cast<unsigned>(query_tiles * shape.batch * shape.heads);
  with_head_size_and_dropout(shape.head_size, params.dropout_p > 0.0f, [&](auto d, auto dropout) {
    constexpr int D = decltype(d)::value;
    constexpr bool kDropout = decltype(dropout)::value;
    const auto kernel = attention_forward_hopper_kernel<D, kDropout>;
    const int group = forward_block_group(shape, params.causal, query_tiles,
                                          int64_t{kBlocksPerMultiprocessor<kDropout>} * multiprocessor_count());
    const AttentionShape kv_shape = key_value_shape(shape);
    const CUtensorMap k_map = encode_tensor_map(head_rows_map(in.k, kv_shape, in.kv_strides, kKeysPerTile<D>));
    const CUtensorMap v_map = encode_tensor_map(head_rows_map(in.v, kv_shape, in.kv_strides, kKeysPerTile<D>));
    constexpr size_t kSmem = Smem<D, kKeysPerTile<D>>::kBytes;
    FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    launch_dependent(kernel, grid, kHopperThreads, kSmem, params, q_map, k_map, v_map, group);
    FT_CUDA_CHECK_LAUNCH("attention_forward_hopper_kernel");
  });
}

}  // namespace ft::cuda
