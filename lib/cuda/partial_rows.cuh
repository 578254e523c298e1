// Column sums of a few rows of per-block partials over many columns (a backward's per-block
// bias or weight gradients): a block of kPartialRowWarps warps takes 32 columns, its warps split
// the rows, and warp 0 adds the warps' sums in warp order, so the result is deterministic. It
// runs with the GPU otherwise idle, so its time is latency: 8 warps a block left each warp 4
// rounds of loads, 32 leave one.
#pragma once
#include <cstdint>

namespace ft::cuda {

constexpr int kPartialRowWarps = 32;

/// Σ_r partials[r · stride + col] over `rows` rows for this thread's lane column `col` (a block of
/// kPartialRowWarps warps, col = blockIdx.x · 32 + lane; `active`: col is in range): warp w adds
/// rows r ≡ w (mod kPartialRowWarps), kLoads loads in flight. The total is returned in warp 0;
/// other warps get their own share. Every thread of the block must call it (a barrier inside).
template <int kLoads>
__device__ __forceinline__ float sum_partial_rows(const float* partials, int rows, int64_t stride, int64_t col,
                                                  bool active) {
  __shared__ float by_warp[kPartialRowWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc = 0.0f;
  if (active) {
    int r = warp;
    for (; r + (kLoads - 1) * kPartialRowWarps < rows; r += kLoads * kPartialRowWarps) {
      float part[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) part[u] = __ldcg(&partials[(r + kPartialRowWarps * u) * stride + col]);
#pragma unroll
      for (int u = 0; u < kLoads; ++u) acc += part[u];
    }
    for (; r < rows; r += kPartialRowWarps) acc += __ldcg(&partials[r * stride + col]);
  }
  by_warp[warp][lane] = acc;
  __syncthreads();
  if (warp != 0) return acc;
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kPartialRowWarps; ++w) total += by_warp[w][lane];
  return total;
}

}  // namespace ft::cuda
