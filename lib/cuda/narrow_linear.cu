// The forward of linear layers with few outputs (a classifier's 10 classes): y = x·Wᵀ + b on
// the tensor cores with W's rows padded to 16, as one pass over x at memory speed.
//
// cuBLAS runs such a product as tiles at least 32 outputs wide, mostly empty: on the H100 the
// MLP's 4096 × 1024 → 10 classifier took 9.9 us (cutlass) plus 3.3 for the bias add, against
// 2.7 us to read x once. A CUDA-core version (a warp's lanes over the columns, W in shared
// memory) ran at 0.25 instructions a cycle with 2 warps a scheduler and took 14.8 us (session
// 19, branch wip/narrow-linear).
//
// Here W (rows padded to 16 with zeros) sits in shared memory, and a block takes groups of 8
// rows of x in turn, copying the next group (cp.async) while it computes one. Its 4 warps split
// the columns in 32-wide slices, slice s to warp s mod 4. For one slice, lane (g, q) =
// (l / 4, l % 4) reads 16 bytes of x row g, columns 8q..8q+7, and the same 16 bytes of W rows
// g and g + 8: the dot product does not depend on the order of its terms, so those 8 columns
// fill the lane's k positions of two m16n8k16 products (first columns 8q..8q+3, then
// 8q+4..8q+7) in both operands alike, and each operand is one 16-byte read instead of four
// 4-byte ones. C (16 outputs × 8 rows) is added over the warps in warp order through shared
// memory, and warp 0 adds the bias and stores. The backward is the primitives' (lib/ops/linear.cpp).
#include <algorithm>

#include "lib/cuda/mma.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/linear.h"

namespace ft::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kGroupRows = 8;  // rows a block takes at once: the n of one m16n8k16 product

/// Row stride in shared memory, in bf16: a row of `in` padded so that it spans 4 mod 8 sixteen-
/// byte chunks. The 8 lanes of a 16-byte access phase (rows g, g + 1 at chunks q = 0..3) then
/// hit 8 different chunk positions: no bank conflicts.
__host__ __device__ inline int padded_row(int in) { return in + 8 * ((4 - (in / 8) % 8 + 8) % 8); }

__device__ __forceinline__ uint4 load_shared16(const __nv_bfloat16* p) { return *reinterpret_cast<const uint4*>(p); }

__global__ void __launch_bounds__(kWarps * 32) narrow_linear_forward_kernel(const __nv_bfloat16* x,
                                                                            const __nv_bfloat16* weight,
                                                                            const __nv_bfloat16* bias,
                                                                            __nv_bfloat16* y, int64_t rows, int in,
                                                                            int out) {
  extern __shared__ uint4 smem[];
  const int stride = padded_row(in), chunks = in / 8;
  __nv_bfloat16* w_s = reinterpret_cast<__nv_bfloat16*>(smem);  // [16][stride], rows >= out zero
  __nv_bfloat16* x_s = w_s + 16 * stride;                         // [2][kGroupRows][stride]
  __shared__ float by_warp[kWarps][32][4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  for (int i = threadIdx.x; i < 16 * chunks; i += blockDim.x) {
    const int o = i / chunks, ch = i - o * chunks;
    mma::copy_async16(w_s + o * stride + 8 * ch, weight + static_cast<int64_t>(o < out ? o : 0) * in + 8 * ch,
                      o < out ? 16 : 0);
  }
  // A group's rows of x, copied while the previous group is computed (rows past the end read
  // as zeros).
  auto stage_rows = [&](int64_t row0, int buffer) {
    if (row0 < rows) {
      for (int i = threadIdx.x; i < kGroupRows * chunks; i += blockDim.x) {
        const int r = i / chunks, ch = i - r * chunks;
        const bool live = row0 + r < rows;
        mma::copy_async16(x_s + (buffer * kGroupRows + r) * stride + 8 * ch, x + (live ? row0 + r : 0) * in + 8 * ch,
                          live ? 16 : 0);
      }
    }
    mma::commit_copies();  // an empty group past the end keeps the wait count uniform
  };
  const int64_t step = static_cast<int64_t>(gridDim.x) * kGroupRows;
  int buffer = 0;
  stage_rows(blockIdx.x * static_cast<int64_t>(kGroupRows), 0);  // (W's copies join this group)
  for (int64_t row0 = blockIdx.x * static_cast<int64_t>(kGroupRows); row0 < rows; row0 += step, buffer ^= 1) {
    stage_rows(row0 + step, buffer ^ 1);
    mma::wait_copies<1>();
    __syncthreads();
    // Warp w takes the 32-column slices s = w, w + 4, ...; lane (g, q) the 8 columns 32s + 8q..
    const __nv_bfloat16* x_row = x_s + (buffer * kGroupRows + g) * stride + 8 * q;
    const __nv_bfloat16* w_lo = w_s + g * stride + 8 * q;
    const __nv_bfloat16* w_hi = w_lo + 8 * stride;
    float c[4] = {};
    for (int s = warp; s < in / 32; s += kWarps) {
      const uint4 xv = load_shared16(x_row + 32 * s), lo = load_shared16(w_lo + 32 * s),
                  hi = load_shared16(w_hi + 32 * s);
      const uint32_t a_first[4] = {lo.x, hi.x, lo.y, hi.y};
      const uint32_t a_second[4] = {lo.z, hi.z, lo.w, hi.w};
      mma::mma_bf16(c, a_first, xv.x, xv.y);
      mma::mma_bf16(c, a_second, xv.z, xv.w);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) by_warp[warp][lane][k] = c[k];
    __syncthreads();
    if (warp == 0) {
      float total[4] = {};
#pragma unroll
      for (int w = 0; w < kWarps; ++w)
#pragma unroll
        for (int k = 0; k < 4; ++k) total[k] += by_warp[w][lane][k];
      // c0, c1: output g of rows 2q, 2q + 1; c2, c3: output g + 8 of the same rows.
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int o = g + (k >= 2 ? 8 : 0);
        const int64_t r = row0 + 2 * q + (k & 1);
        if (o < out && r < rows)
          y[r * out + o] = __float2bfloat16_rn(total[k] + (bias ? __bfloat162float(bias[o]) : 0.0f));
      }
    }
    __syncthreads();  // this buffer and by_warp are read before they are written again
  }
  mma::wait_copies<0>();  // (no copy is left in flight at exit)
}

}  // namespace

bool narrow_linear_supported(const Tensor& x, const Tensor& weight) {
  const int64_t out = weight.size(0), in = weight.size(1);
  return x.dtype() == DType::BF16 && out <= kNarrowLinearMaxOut && in % 32 == 0 && in <= kNarrowLinearMaxIn &&
         reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(weight.data_ptr()) % 16 == 0;
}

void narrow_linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  const int64_t rows = x.size(0);
  if (rows == 0) return;
  // Two blocks an SM, each taking groups of 8 rows in turn with the next group's copies in
  // flight (W and two groups of rows in shared memory: 68 KB at IN = 1024).
  const int in = static_cast<int>(weight.size(1));
  const size_t smem = static_cast<size_t>(16 + 2 * kGroupRows) * padded_row(in) * sizeof(__nv_bfloat16);
  if (smem > 48 * 1024)
    FT_CUDA_CHECK(cudaFuncSetAttribute(narrow_linear_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>((rows + kGroupRows - 1) / kGroupRows, 2LL * multiprocessor_count()));
  narrow_linear_forward_kernel<<<blocks, kWarps * 32, smem, stream()>>>(
      x.data<__nv_bfloat16>(), weight.data<__nv_bfloat16>(),
      bias.defined() ? bias.data<__nv_bfloat16>() : nullptr, y.data<__nv_bfloat16>(), rows,
      static_cast<int>(weight.size(1)), static_cast<int>(weight.size(0)));
  FT_CUDA_CHECK_LAUNCH("narrow_linear_forward_kernel");
}

}  // namespace ft::cuda
