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
// - grouped-query attention: a block's query head h reads key/value head h / group, in place.
// - dropout on the probabilities: element (b, h, i, j) is kept when
//   philox::dropout_uniform(seed, offset, ((b·NH + h)·T + i)·T + j) >= p, exactly the twin's draw.
#include <cuda_bf16.h>

#include <algorithm>

#include "lib/ops/attention/attention_hopper.h"
#include "lib/ops/attention/attention_mma.cuh"

namespace ft::cuda {

namespace {

using namespace flash;

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
  const int64_t in_base = head_offset(p.in, p.heads, task.head), kv_base = kv_head_offset(p, task.head);
  const int all_tiles = (p.tokens + kTile - 1) / kTile;
  const int key_tiles = p.causal ? min(all_tiles, (q0 + kRows + kTile - 1) / kTile) : all_tiles;
  load_tile<D, kRows>(q_tile, p.q + in_base, p.in.token, q0, p.tokens);
  load_key_values<D>(k_tile(0), v_tile(0), p, kv_base, 0);
  mma::commit_copies();

  const int row0 = q0 + warp * 16 * kM;  // the warp's first query row
  uint32_t qf[kM][D / 16][4];
  float acc[kM][D / 8][4] = {};
  float row_max[kM][2], row_sum[kM][2];
#pragma unroll
  for (int m = 0; m < kM; ++m) row_max[m][0] = row_max[m][1] = -INFINITY, row_sum[m][0] = row_sum[m][1] = 0.0f;
  for (int kt = 0; kt < key_tiles; ++kt) {
    const int buf = kt & 1, k0 = kt * kTile;
    advance_stage(kt + 1 < key_tiles,
                  [&] { load_key_values<D>(k_tile(buf ^ 1), v_tile(buf ^ 1), p, kv_base, k0 + kTile); });
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

void attention_forward(const AttentionShape& shape, const AttentionInputs& in, void* out, HeadStrides out_strides,
                       const Tensor& lse, bool causal, double dropout_p, uint64_t seed, const Tensor& offset) {
  Params p = make_params(shape, causal, dropout_p, seed, offset);
  p.q = static_cast<const bf16*>(in.q);
  p.k = static_cast<const bf16*>(in.k);
  p.v = static_cast<const bf16*>(in.v);
  p.in = in.strides;
  p.kv = in.kv_strides;
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


}  // namespace ft::cuda
