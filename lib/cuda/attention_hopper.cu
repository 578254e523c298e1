// Flash attention forward on Hopper (sm_90a), after FlashAttention-3 (Shah et al., 2024): the
// same algorithm as the mma.sync kernel (lib/cuda/attention.cu: online softmax in registers,
// Philox dropout on the probabilities, the output and the log-sum-exp saved), on Hopper's
// asynchronous units:
// - TMA copies the tiles of Q, K and V straight out of their tensors (the fused QKV output or
//   [B, NH, T, HS]) into 128-byte-swizzled shared memory, rows past T zero-filled;
// - warp specialization: one producer warp only issues those copies, into a ring of K/V stages
//   guarded by mbarriers (full: the copy has landed; empty: every consumer warp is done with
//   the stage), so loads run ahead of the math without any thread waiting on memory;
// - two consumer warpgroups of 64 query rows each do S = Q·Kᵀ as wgmma with both operands in
//   shared memory, the mask and online softmax (and dropout) on the accumulators, and O += P·V
//   as wgmma with P from registers (the probability accumulators are already its A fragments)
//   and V read N-major. Two warpgroups on one multiprocessor let one's softmax overlap the
//   other's products.
// Blocks take 128 query rows against 128-key tiles at either head size (HS 128: 64 output
// accumulators a thread; one block of 288 threads a multiprocessor leaves 224 registers each).
// Dispatched from attention_forward when the device is sm_90 and TMA can address the inputs.
#include <cuda.h>

#include "lib/cuda/attention_hopper.h"
#include "lib/cuda/attention_tile.cuh"
#include "lib/cuda/runtime.h"
#include "lib/cuda/tensor_map.h"
#include "lib/cuda/tma.cuh"
#include "lib/cuda/wgmma.cuh"

namespace ft::cuda {

namespace {

using namespace flash;

constexpr int kConsumers = 2;                    // warpgroups of 64 query rows
constexpr int kBlockRows = 64 * kConsumers;      // query rows per block
constexpr int kKeys = 128;                       // keys per streamed tile
constexpr int kStages = 2;                       // K/V tiles in flight
constexpr int kHopperThreads = 128 * (kConsumers + 1);  // and the producer warpgroup
constexpr int kRowBytes = 128;                   // a swizzle row: 64 bf16 columns
constexpr int kBoxCols = kRowBytes / 2;

/// Shared memory: Q, then the K stages, then the V stages, each tile stored as D / 64 blocks of
/// rows × 128 bytes (one TMA box each), then the barriers.
template <int D>
struct Smem {
  static constexpr int kColumnBlocks = D / kBoxCols;
  static constexpr uint32_t kQBytes = kBlockRows * D * 2, kTileBytes = kKeys * D * 2;
  static constexpr uint32_t kK = kQBytes, kV = kK + kStages * kTileBytes, kBarriers = kV + kStages * kTileBytes;
  static constexpr int kBarrierCount = 1 + 3 * kStages;             // Q; K full, V full, empty per stage
  static constexpr size_t kBytes = kBarriers + kBarrierCount * 8 + 1024;  // and slack to align to 1024
};

/// Starts the copy of rows [row0, row0 + rows) of this head's [T, D] matrix into `dst`, one
/// box per 64-column block, counted on `barrier`.
template <int D>
__device__ __forceinline__ void load_rows(unsigned char* dst, const CUtensorMap& map, uint64_t* barrier, int rows,
                                          int row0, int head, int batch) {
#pragma unroll
  for (int c = 0; c < Smem<D>::kColumnBlocks; ++c)
    tma::load_4d(dst + c * rows * kRowBytes, map, barrier, c * kBoxCols, row0, head, batch);
}

/// Descriptor of the k-th 16-column slice of a K-major tile (Q or K) from row `row0`.
template <int kRows>
__device__ __forceinline__ uint64_t k_major_slice(const unsigned char* tile, int row0, int k) {
  return wgmma::descriptor(tile + (k / 4) * kRows * kRowBytes + row0 * kRowBytes + (k % 4) * 32, 16, 8 * kRowBytes);
}

template <int D, bool kDropout>
__global__ void __launch_bounds__(kHopperThreads, 1)
    attention_forward_hopper_kernel(const __grid_constant__ Params p, const __grid_constant__ CUtensorMap q_map,
                                    const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Smem<D>;
  extern __shared__ unsigned char raw_smem[];
  // TMA's 128-byte swizzle is a function of the address bits, and the descriptors assume it
  // starts at each tile: align the tiles to 1024 bytes.
  unsigned char* const smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw_smem) + 1023) & ~uintptr_t{1023});
  uint64_t* const q_full = reinterpret_cast<uint64_t*>(smem + S::kBarriers);
  uint64_t* const k_full = q_full + 1;
  uint64_t* const v_full = k_full + kStages;
  uint64_t* const empty = v_full + kStages;
  const int q0 = query_tile(p.causal) * kBlockRows, head = head_index() % p.heads, batch = head_index() / p.heads;
  const int all_tiles = (p.tokens + kKeys - 1) / kKeys;
  const int key_tiles = p.causal ? min(all_tiles, (q0 + kBlockRows + kKeys - 1) / kKeys) : all_tiles;
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    tma::init_barrier(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      tma::init_barrier(k_full + s, 1);
      tma::init_barrier(v_full + s, 1);
      tma::init_barrier(empty + s, 4 * kConsumers);  // one arrival per consumer warp
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == kConsumers) {  // the producer warpgroup; one thread issues every copy
    // Registers are allocated per warpgroup: the producer gives most of its share to the
    // consumers (24 + 2 × 240 per thread fits the 64K of a multiprocessor).
    wgmma::set_max_registers<24>();
    if (threadIdx.x == 128 * kConsumers) {
      tma::prefetch_map(q_map);
      tma::prefetch_map(k_map);
      tma::prefetch_map(v_map);
      tma::arrive_expecting(q_full, S::kQBytes);
      load_rows<D>(smem, q_map, q_full, kBlockRows, q0, head, batch);
      for (int kt = 0; kt < key_tiles; ++kt) {
        const int stage = kt % kStages;
        tma::wait(empty + stage, ((kt / kStages) & 1) ^ 1);  // the stage's previous tile is consumed
        tma::arrive_expecting(k_full + stage, S::kTileBytes);
        load_rows<D>(smem + S::kK + stage * S::kTileBytes, k_map, k_full + stage, kKeys, kt * kKeys, head, batch);
        tma::arrive_expecting(v_full + stage, S::kTileBytes);
        load_rows<D>(smem + S::kV + stage * S::kTileBytes, v_map, v_full + stage, kKeys, kt * kKeys, head, batch);
      }
    }
    return;  // no block-wide barrier follows
  }

  wgmma::set_max_registers<240>();
  const int warp = threadIdx.x / 32 % 4, row0 = q0 + 64 * warpgroup + 16 * warp;  // the warp's first query row
  float s[kKeys / 8][4] = {}, acc[D / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  tma::wait(q_full, 0);
  for (int kt = 0; kt < key_tiles; ++kt) {
    const int stage = kt % kStages, k0 = kt * kKeys;
    const unsigned parity = (kt / kStages) & 1;
    const unsigned char* const k_tile = smem + S::kK + stage * S::kTileBytes;
    const unsigned char* const v_tile = smem + S::kV + stage * S::kTileBytes;
    tma::wait(k_full + stage, parity);
    wgmma::pin(s);
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      wgmma::mma_ss(s, k_major_slice<kBlockRows>(smem, 64 * warpgroup, k), k_major_slice<kKeys>(k_tile, 0, k), k > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(s);

    if (edge_tile(p, k0, kKeys, row0)) mask_scores(s, p, row0, k0);
    online_softmax_step(s, acc, row_max, row_sum, p.scale_log2);
    if constexpr (kDropout)
      apply_dropout(s, p, [&](int n, int e) {
        return probability_index(p.tokens, row0 + fragment_row(e), k0 + fragment_col(n, e));
      });
    uint32_t probs[kKeys / 16][4];
#pragma unroll
    for (int k = 0; k < kKeys / 16; ++k) mma::accumulator_to_a(probs[k], s[2 * k], s[2 * k + 1]);

    tma::wait(v_full + stage, parity);
    wgmma::pin(acc);
    wgmma::pin(probs);
    wgmma::fence();
    // V is [keys][D]: N-major for P·V, 8-key groups 1024 bytes apart, 64-column blocks a tile
    // of rows apart; 16 keys a product.
#pragma unroll
    for (int k = 0; k < kKeys / 16; ++k)
      wgmma::mma_rs_n_major(acc, probs[k], wgmma::descriptor(v_tile + k * 16 * kRowBytes, kKeys * kRowBytes, 8 * kRowBytes));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(acc);
    wgmma::pin(probs);  // the products read these registers until the wait
    __syncwarp();
    if (threadIdx.x % 32 == 0) tma::arrive(empty + stage);
  }
  finish_rows<D>(p, row0, acc, row_max, row_sum);
#else
  __trap();  // dispatched only on sm_90 (hopper_forward_compiled_and_device_fits)
#endif
}

TensorMapRequest head_rows_map(const void* base, const AttentionShape& shape, const HeadStrides& strides, int rows) {
  return TensorMapRequest{base,
                          {shape.head_size, shape.tokens, shape.heads, shape.batch},
                          {strides.token, strides.head, strides.batch},
                          {kBoxCols, rows, 1, 1}};
}

}  // namespace

bool hopper_forward_compiled_and_device_fits() {
#if defined(FT_HOPPER_KERNELS)
  return compute_capability() == 90;
#else
  return false;
#endif
}

bool hopper_forward_takes(const AttentionInputs& in, const AttentionShape& shape) {
  for (const void* base : {in.q, in.k, in.v})
    if (!tensor_map_possible(head_rows_map(base, shape, in.strides, kKeys))) return false;
  return true;
}

void attention_forward_hopper(const Params& params, const AttentionShape& shape, const AttentionInputs& in) {
  const CUtensorMap q_map = encode_tensor_map(head_rows_map(in.q, shape, in.strides, kBlockRows));
  const CUtensorMap k_map = encode_tensor_map(head_rows_map(in.k, shape, in.strides, kKeys));
  const CUtensorMap v_map = encode_tensor_map(head_rows_map(in.v, shape, in.strides, kKeys));
  const dim3 grid(static_cast<unsigned>((shape.tokens + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(shape.batch * shape.heads));
  with_head_size_and_dropout(shape.head_size, params.dropout_p > 0.0f, [&](auto d, auto dropout) {
    constexpr int D = decltype(d)::value;
    auto kernel = attention_forward_hopper_kernel<D, decltype(dropout)::value>;
    FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Smem<D>::kBytes)));
    kernel<<<grid, kHopperThreads, Smem<D>::kBytes, stream()>>>(params, q_map, k_map, v_map);
    FT_CUDA_CHECK_LAUNCH("attention_forward_hopper_kernel");
  });
}

}  // namespace ft::cuda
