// The pieces the flash attention kernels share (attention_forward.cu and attention_backward.cu on mma.sync,
// lib/ops/attention/attention_hopper.cu on wgmma): the launch parameters, the accumulator fragment
// coordinates, the masks, the online softmax step, the Philox dropout on probabilities and the
// output rows. Both kernels hold scores and outputs in the m16n8 accumulator layout (wgmma's
// m64nN accumulator is that layout repeated), so one warp's 16-row tile is the unit here.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "lib/causal_order.h"
#include "lib/cuda/math.cuh"
#include "lib/cuda/mma.cuh"
#include "lib/error.h"
#include "lib/ops/attention/attention_cuda.h"
#include "lib/philox.h"

namespace ft::cuda::flash {

using bf16 = __nv_bfloat16;

/// Query rows of a tile of the Hopper backward's row statistics (Params::row_stats).
constexpr int kStatTileRows = 64;

struct Params {
  const bf16 *q, *k, *v;  // element (b, h, t, d): ptr + b·in.batch + h·in.head + t·in.token + d (q),
  HeadStrides in, kv;     // the same by kv for k and v, whose head is query head h / group
  bf16* out;              // forward output; the backward reads it through `o`
  const bf16 *o, *dout;
  HeadStrides out_strides;
  bf16 *dq, *dk, *dv;     // laid out as q (in), k and v (kv)
  float* lse;             // [B·NH, T], natural log of Σ_j exp(scaled score)
  float* delta;           // [B·NH, T], dO_i·O_i
  float* dq_sum;          // [B·NH, query tiles, rows × (HS + 8)]: the shares of dQ added so far
  int* dq_turns;          // [B·NH, query tiles]: how many shares are in dq_sum (zeroed per launch)
  float* row_stats;       // Hopper backward: [B·NH, T / kStatTileRows rounded up, {lse·log2(e), Δ}, kStatTileRows]
  // The QKV projection's bias gradient by parts (lib/ops/attention/attention.h): [B, T / kQkvBiasRows
  // rounded up, 3·NH·HS], over each chunk of kQkvBiasRows tokens the column sums of dQ as stored,
  // 0 for K's and dO's column sums for V's (attention_delta_kernel says why); null when not
  // wanted, and always without dropout.
  float* qkv_bias_partials;
  int heads, tokens;
  int group;              // query heads a key/value head serves (1 without GQA)
  bool causal;
  float scale, scale_log2;  // 1/√HS, and times log2(e) for exp2
  float dropout_p, dropout_scale;
  uint64_t seed;
  const int64_t* offset;
};

/// Tokens a row of the QKV bias partials covers: a block of the delta kernel (dO's column sums,
/// the bias's V part) and of the dQ finish kernel (dQ's). The delta kernel's chunks of padded
/// rows must be as many as the finish kernel's chunks of tokens.
constexpr int kQkvBiasRows = 128;
static_assert(kQkvBiasRows % kStatTileRows == 0, "rows padded to whole statistics tiles add no chunk");

/// Row and column of element e of accumulator tile n, relative to the warp's 16 × 8n tile.
__device__ __forceinline__ int fragment_row(int e) { return (threadIdx.x % 32) / 4 + (e / 2) * 8; }
__device__ __forceinline__ int fragment_col(int n, int e) { return n * 8 + 2 * (threadIdx.x % 4) + (e % 2); }

/// The dropout draw, reusing one Philox block for the consecutive counters it covers. A thread's
/// fragment holds 2 adjacent columns of each 8, so it uses 2 of a block's 8 half-words and the
/// 4 lanes of a quad each draw the same block (sharing it by shuffles is not built).
struct DropoutMask {
  uint64_t seed, offset;
  uint32_t threshold;  // philox::keep_threshold(p)
  uint64_t cached = ~0ull;
  philox::Uint4 bits{};
  __device__ bool keep(uint64_t index) {
    const uint64_t counter = offset + index;
    if ((counter >> 3) != cached) {
      cached = counter >> 3;
      bits = philox::block_bits(seed, cached);
    }
    return philox::half_word(bits, static_cast<unsigned>(counter & 7)) >= threshold;
  }
};

__device__ __forceinline__ DropoutMask dropout_mask(const Params& p) {
  return DropoutMask{p.seed, p.dropout_p > 0.0f ? static_cast<uint64_t>(*p.offset) : 0,
                     philox::keep_threshold(p.dropout_p)};
}

/// Dropout on one warp's row tile of accumulator fragments: element e of column block n is kept
/// (and scaled) when the draw at index_of(n, e) keeps it, else zeroed.
template <int kN, class IndexOf>
__device__ __forceinline__ void apply_dropout(float (&s)[kN][4], const Params& p, IndexOf&& index_of) {
  DropoutMask mask = dropout_mask(p);
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = mask.keep(index_of(n, e)) ? s[n][e] * p.dropout_scale : 0.0f;
}

/// Output tile of the warp (16 rows × kCols) as bf16 pairs; rows past T are dropped.
template <int kCols>
__device__ __forceinline__ void store_rows(bf16* base, int64_t token_stride, int row0, int tokens,
                                           const float (&acc)[kCols / 8][4], float scale0, float scale1) {
#pragma unroll
  for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + fragment_row(2 * half);
      if (row >= tokens) continue;
      const float s = half ? scale1 : scale0;
      *reinterpret_cast<uint32_t*>(base + static_cast<int64_t>(row) * token_stride + fragment_col(n, 0)) =
          mma::pack_bf16(acc[n][2 * half] * s, acc[n][2 * half + 1] * s);
    }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// Where head pair bh (b·NH + h) starts in a [B, NH, T, HS] view. Kernels know their pair: the
/// forwards from their block order (causal_task), the backwards from their key/value head
/// (first_query_pair), the chunk kernels (Δ, the dQ finish) from blockIdx.y.
__device__ __forceinline__ int64_t head_offset(const HeadStrides& s, int heads, int bh) {
  return static_cast<int64_t>(bh / heads) * s.batch + static_cast<int64_t>(bh % heads) * s.head;
}
/// Where the key and value rows of query head pair bh (b·NH + h) start: key/value head h / group.
__device__ __forceinline__ int64_t kv_head_offset(const Params& p, int bh) {
  return static_cast<int64_t>(bh / p.heads) * p.kv.batch + static_cast<int64_t>(bh % p.heads / p.group) * p.kv.head;
}
/// The backwards' blocks own one key/value head's key tile (blockIdx.y = b·NKV + its head) and
/// stream the tiles of its group's query heads: the pair b·NH + h of the group's first.
__device__ __forceinline__ int first_query_pair(const Params& p) {
  const int kv_heads = p.heads / p.group, kv_pair = blockIdx.y;
  return kv_pair / kv_heads * p.heads + kv_pair % kv_heads * p.group;
}
__device__ __forceinline__ int64_t block_kv_offset(const Params& p) { return kv_head_offset(p, first_query_pair(p)); }
/// Flat index of probability (i, j) of head bh in the [B, NH, T, T] dropout draw.
__device__ __forceinline__ uint64_t probability_index(int tokens, int bh, int i, int j) {
  return (static_cast<uint64_t>(bh) * tokens + i) * tokens + j;
}

/// Heads per group of the forwards' block order (lib/causal_order.h, causal_task on a 1-D grid)
/// with `resident` blocks at once: the model's choice among groups whose keys and values fit a
/// quarter of L2 (a group of all 192 heads at HS 64, 48 MB, ran the Hopper forward 3% slower
/// than the model's 24); 1 when not causal, where every block is as long.
int forward_block_group(const AttentionShape& shape, bool causal, int64_t query_tiles, int64_t resident);

/// The backwards' grid: (key tiles, B·NKV), a block a key tile of one key/value head.
inline dim3 backward_grid(const AttentionShape& shape, int keys_per_block) {
  return dim3(static_cast<unsigned>((shape.tokens + keys_per_block - 1) / keys_per_block),
              static_cast<unsigned>(shape.batch * shape.key_value_heads()));
}

/// Whether key tile [k0, k0 + keys) needs masking for query rows from q0: it crosses the
/// causal diagonal or reaches past T.
__device__ __forceinline__ bool edge_tile(const Params& p, int k0, int keys, int q0) {
  return k0 + keys > p.tokens || (p.causal && k0 + keys - 1 > q0);
}

/// Hides the scores of the warp's 16-row tile (rows from row0, keys from k0) that lie past T or
/// above the causal diagonal.
template <int kN>
__device__ __forceinline__ void mask_scores(float (&s)[kN][4], const Params& p, int row0, int k0) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + fragment_row(e), col = k0 + fragment_col(n, e);
      if (col >= p.tokens || (p.causal && col > row)) s[n][e] = -INFINITY;
    }
}

/// One key tile of the online softmax for the warp's 16-row tile, on the raw scores: the new row
/// maxima, the row sums rescaled to them, then one FMA and one ex2 per score; the scores become
/// unnormalized probabilities. `rescale` is the factor for the rows' output accumulators, which
/// the caller applies (rescale_rows) at once or once a product still writing them is complete.
template <int kN>
__device__ __forceinline__ void online_softmax_scores(float (&s)[kN][4], float (&row_max)[2], float (&row_sum)[2],
                                                      float (&rescale)[2], float scale_log2) {
  float shift[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < kN; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    const float new_max = fmaxf(row_max[h], quad_max(tile_max));
    shift[h] = new_max == -INFINITY ? 0.0f : new_max * scale_log2;  // nothing visible yet: stays 0
    rescale[h] = exp2_approx(row_max[h] * scale_log2 - shift[h]);
    row_max[h] = new_max;
    row_sum[h] *= rescale[h];
  }
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float prob = exp2_approx(fmaf(s[n][e], scale_log2, -shift[e / 2]));
      row_sum[e / 2] += prob;  // the normalizer counts every probability, dropped or not
      s[n][e] = prob;
    }
}

template <int kD>
__device__ __forceinline__ void rescale_rows(float (&acc)[kD][4], const float (&rescale)[2]) {
#pragma unroll
  for (int n = 0; n < kD; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] *= rescale[e / 2];
}

/// online_softmax_scores with the output accumulators rescaled at once.
template <int kN, int kD>
__device__ __forceinline__ void online_softmax_step(float (&s)[kN][4], float (&acc)[kD][4], float (&row_max)[2],
                                                    float (&row_sum)[2], float scale_log2) {
  float rescale[2];
  online_softmax_scores(s, row_max, row_sum, rescale, scale_log2);
  rescale_rows(acc, rescale);
}

/// The warp's 16 output rows from row0 of head bh, normalized, and their log-sum-exp.
template <int D>
__device__ __forceinline__ void finish_rows(const Params& p, int bh, int row0, const float (&acc)[D / 8][4],
                                            const float (&row_max)[2], const float (&row_sum)[2]) {
  float total[2], inverse[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    total[h] = quad_sum(row_sum[h]);
    inverse[h] = 1.0f / total[h];
  }
  store_rows<D>(p.out + head_offset(p.out_strides, p.heads, bh), p.out_strides.token, row0, p.tokens, acc, inverse[0],
                inverse[1]);
  if (threadIdx.x % 4 == 0)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + fragment_row(2 * h);
      if (row < p.tokens)
        p.lse[static_cast<int64_t>(bh) * p.tokens + row] = (row_max[h] * p.scale_log2 + log2f(total[h])) / kLog2e;
    }
}

// Head size and dropout are compile-time: without dropout the kernels carry no Philox state
// (with it in the same body, the HS 64 forward spilled at 255 registers).
template <class F>
void with_head_size_and_dropout(int64_t head_size, bool dropout, F&& f) {
  auto with_dropout = [&](auto d) {
    if (dropout) f(d, std::true_type{});
    else f(d, std::false_type{});
  };
  if (head_size == 64) return with_dropout(std::integral_constant<int, 64>{});
  if (head_size == 128) return with_dropout(std::integral_constant<int, 128>{});
  FT_FAIL("attention: the fused kernel takes head sizes 64 and 128, got ", head_size);
}

}  // namespace ft::cuda::flash
