// The forward of linear layers with few outputs (a classifier's 10 classes): y = x·Wᵀ + b on
// the tensor cores with W's rows padded to 16, as one pass over x at memory speed.
//
// cuBLAS runs such a product as tiles at least 32 outputs wide, mostly empty, and adds the bias
// in a second pass: several times the time of reading x once. A CUDA-core version was
// issue-bound and slower still (docs/history/performance-log.md).
//
// Here W (rows padded to 16 with zeros) sits in shared memory, and a block takes groups of 8
// rows of x in turn, copying the next group (cp.async) while it computes one. Its 4 warps split
// the columns in 32-wide slices, slice s to warp s mod 4. For one slice, lane (g, q) =
// (l / 4, l % 4) reads 16 bytes of x row g, columns 8q..8q+7, and the same 16 bytes of W rows
// g and g + 8: the dot product does not depend on the order of its terms, so those 8 columns
// fill the lane's k positions of two m16n8k16 products (first columns 8q..8q+3, then
// 8q+4..8q+7) in both operands alike, and each operand is one 16-byte read instead of four
// 4-byte ones. C (16 outputs × 8 rows) is added over the warps in warp order through shared
// memory, and warp 0 adds the bias and stores.
//
// The backward's dx is cuBLAS's product. dW and db come from one pass over x and dy on the
// tensor cores and a small kernel adding the chunks' sums (narrow_linear_backward_params,
// below), where cuBLAS took a split-K product, an accumulate into the f32 gradient, the bias's
// column sums and another accumulate: five kernels, about twice the time.
#include <algorithm>
#include <cstdint>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/grad_sink.cuh"
#include "lib/cuda/mma.cuh"
#include "lib/cuda/row_map.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/linear/linear_cuda.h"

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
  begin_dependent_kernel();
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

// ---- dW and db

// dW[o, i] = Σ_n dy[n, o]·x[n, i] and db[o] = Σ_n dy[n, o] on tensor cores: one m16n8k16 product
// has the outputs (16, zeros past `out`) as M, 8 columns of x as N and 16 rows as K. A block
// takes a tile of 128 columns over slices of 128 rows; x's slice comes into shared memory by
// asynchronous copies, dy's through registers (the rows past the end read as zeros), and both fragments
// come from ldmatrix.trans (dy is A stored k-major, x is B stored k-major). Warp w owns columns
// 16w.. of the tile, so no warp adds another's sums; warp 0 of tile 0 also multiplies dy by a B
// of ones, which is db. A block loops over the slices c, c + chunks, ... With one chunk its sums
// go straight into the gradients; otherwise each leaves them in the scratch and a second kernel
// adds the chunks' in chunk order (deterministic, and no fences or atomics).
//
// On CUDA cores (16 multiply-adds an element of x) the same pass was issue-bound in the
// multiply-adds and stalled at the fences of cross-block sums, hence the tensor cores and the
// ordered second kernel.
constexpr int kParamWarps = 8;
constexpr int kParamThreads = kParamWarps * 32;
constexpr int kTileCols = 128;        // 8 warps × 16 columns
constexpr int kSliceRows = 128;       // rows of x and dy in shared memory at a time
constexpr int kOutSlots = kNarrowLinearMaxOut;
constexpr int kXStride = kTileCols + 8;   // bf16s a row: 272 bytes, ldmatrix without bank conflicts
constexpr int kDyStride = kOutSlots + 8;  // 48 bytes, likewise
constexpr int kWeightSlots = kOutSlots * kTileCols;  // a tile's dW sums: slot o·128 + c
constexpr int kTileSlots = kWeightSlots + kOutSlots;  // then db's
constexpr int kSumThreads = 256;
static_assert(kOutSlots == 16, "one m16n8k16 product covers the outputs");
static_assert(kTileCols == 16 * kParamWarps, "a warp owns 16 columns of the tile");
static_assert(kSliceRows % 16 == 0, "a slice is whole k steps");
static_assert(kParamThreads % kOutSlots == 0 && kSliceRows % (kParamThreads / kOutSlots) == 0,
              "each thread stages one output of dy in every row of its stride, and every row is staged");

// (58 registers: four blocks an SM fit, as the launcher's chunk count assumes.)
__global__ void __launch_bounds__(kParamThreads) narrow_linear_params_kernel(
    const __nv_bfloat16* dy, const __nv_bfloat16* x, int64_t rows, int in, int out, GradSink<__nv_bfloat16> dweight,
    GradSink<__nv_bfloat16> dbias, float* partials) {
  begin_dependent_kernel();
  __shared__ __align__(16) __nv_bfloat16 x_s[kSliceRows][kXStride];
  __shared__ __align__(16) __nv_bfloat16 dy_s[kSliceRows][kDyStride];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = blockIdx.x, tiles = gridDim.x, chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t slices = (rows + kSliceRows - 1) / kSliceRows;
  const int warp_col = tile * kTileCols + warp * 16;  // the warp's first column of x
  const bool weight_warp = dweight.any() && warp_col < in;  // (in is a multiple of 16: all 16 or none)
  const bool bias_warp = dbias.any() && tile == 0 && warp == 0;
  const bool read_x = dweight.any();
  float acc[2][4] = {}, bias_acc[4] = {};
  const uint32_t ones = mma::pack_bf16(1.0f, 1.0f);
  // Staging dy: thread t brings output t % 16 of rows t / 16, t / 16 + 16, ...
  const int stage_out = threadIdx.x % kOutSlots, stage_row = threadIdx.x / kOutSlots;
  constexpr int kStaged = kSliceRows / (kParamThreads / kOutSlots);
  for (int64_t slice = chunk; slice < slices; slice += chunks) {
    const int64_t row0 = slice * kSliceRows;
    const int n = static_cast<int>(std::min<int64_t>(kSliceRows, rows - row0));
    __syncthreads();  // the previous slice is read by everyone
    if (read_x) {
      // 16 copies of 16 bytes a row; rows past the end and columns past x read as zeros.
      for (int i = threadIdx.x; i < kSliceRows * (kTileCols / 8); i += kParamThreads) {
        const int r = i / (kTileCols / 8), col = tile * kTileCols + (i % (kTileCols / 8)) * 8;
        const bool inside = r < n && col < in;
        mma::copy_async16(&x_s[r][col - tile * kTileCols], inside ? x + (row0 + r) * in + col : x, inside ? 16 : 0);
      }
      mma::commit_copies();
    }
    // dy's loads all in flight at once: the row is clamped into the slice rather than guarded.
    const unsigned short* dy_out = reinterpret_cast<const unsigned short*>(dy) + row0 * out + stage_out;
    unsigned short dy_bits[kStaged];
#pragma unroll
    for (int k = 0; k < kStaged; ++k) {
      const int r = std::min(stage_row + k * (kParamThreads / kOutSlots), n - 1);
      dy_bits[k] = stage_out < out ? __ldg(dy_out + static_cast<int64_t>(r) * out) : 0;
    }
#pragma unroll
    for (int k = 0; k < kStaged; ++k) {
      const int r = stage_row + k * (kParamThreads / kOutSlots);
      dy_s[r][stage_out] = __ushort_as_bfloat16(r < n ? dy_bits[k] : static_cast<unsigned short>(0));
    }
    mma::wait_copies<0>();
    __syncthreads();
    if (weight_warp || bias_warp) {
      for (int k0 = 0; k0 < n; k0 += 16) {
        // A: matrices (k 0-7, o 0-7), (k 0-7, o 8-15), (k 8-15, o 0-7), (k 8-15, o 8-15).
        uint32_t a[4];
        mma::load_matrix_x4_trans(a, &dy_s[k0 + (lane / 16) * 8 + lane % 8][((lane / 8) % 2) * 8]);
        if (weight_warp) {
          // B: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
          uint32_t b[4];
          mma::load_matrix_x4_trans(b, &x_s[k0 + ((lane / 8) % 2) * 8 + lane % 8][warp * 16 + (lane / 16) * 8]);
          mma::mma_bf16(acc[0], a, b[0], b[1]);
          mma::mma_bf16(acc[1], a, b[2], b[3]);
        }
        if (bias_warp) mma::mma_bf16(bias_acc, a, ones, ones);
      }
    }
  }

  // C: c0, c1 = (output g, columns 2q, 2q + 1), c2, c3 = (output g + 8, the same columns).
  const int g = lane / 4, q = lane % 4;
  float* chunk_sums = chunks > 1 ? partials + (static_cast<int64_t>(chunk) * tiles + tile) * kTileSlots : nullptr;
  if (weight_warp) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int o = g + 8 * h, col = warp * 16 + 8 * j + 2 * q;  // col: within the tile
        if (chunk_sums) {
          *reinterpret_cast<float2*>(chunk_sums + o * kTileCols + col) = make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
        } else if (o < out) {
          const int64_t index = static_cast<int64_t>(o) * in + tile * kTileCols + col;
          dweight.store(index, acc[j][2 * h]);
          dweight.store(index + 1, acc[j][2 * h + 1]);
        }
      }
  }
  if (bias_warp && q == 0) {  // every column of dy · ones is db: take column 0
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int o = g + 8 * h;
      if (chunk_sums) chunk_sums[kWeightSlots + o] = bias_acc[2 * h];
      else if (o < out) dbias.store(o, bias_acc[2 * h]);
    }
  }
}

// The chunks' sums in a fixed order (row_map.cuh's sum_rows): a thread a slot of a tile.
__global__ void __launch_bounds__(kSumThreads) narrow_linear_params_sum_kernel(const float* partials, int chunks, int tiles,
                                                                       int in, int out, GradSink<__nv_bfloat16> dweight,
                                                                       GradSink<__nv_bfloat16> dbias) {
  begin_dependent_kernel();
  const int index = blockIdx.x * blockDim.x + threadIdx.x;
  if (index >= tiles * kTileSlots) return;
  const int tile = index / kTileSlots, slot = index % kTileSlots;
  const bool bias = slot >= kWeightSlots;
  const int o = bias ? slot - kWeightSlots : slot / kTileCols, col = tile * kTileCols + slot % kTileCols;
  const bool wanted = bias ? dbias.any() && tile == 0 && o < out : dweight.any() && o < out && col < in;
  if (!wanted) return;
  const float sum = sum_rows(partials, static_cast<unsigned>(chunks), static_cast<int64_t>(tiles) * kTileSlots, index);
  if (bias) dbias.store(o, sum);
  else dweight.store(static_cast<int64_t>(o) * in + col, sum);
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
  launch_dependent(narrow_linear_forward_kernel, blocks, kWarps * 32, smem, x.data<__nv_bfloat16>(),
                   weight.data<__nv_bfloat16>(), bias.defined() ? bias.data<__nv_bfloat16>() : nullptr,
                   y.data<__nv_bfloat16>(), rows, static_cast<int>(weight.size(1)), static_cast<int>(weight.size(0)));
  FT_CUDA_CHECK_LAUNCH("narrow_linear_forward_kernel");
}

void narrow_linear_backward_params(const Tensor& dy, const Tensor& x, const GradOutput& dweight,
                                   const GradOutput& dbias) {
  const int64_t rows = x.size(0);
  const int in = static_cast<int>(x.size(1)), out = static_cast<int>(dy.size(1));
  FT_CHECK(dy.dtype() == DType::BF16 && x.dtype() == DType::BF16 && x.dim() == 2 && dy.dim() == 2 &&
               dy.size(0) == rows && in % 32 == 0 && out <= kOutSlots && rows > 0 &&
               reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0,
           "narrow linear backward: bf16 dy [N, <= 16] and 16-byte aligned x [N, 32k] with N > 0 expected");
  if (!dweight.defined() && !dbias.defined()) return;
  // Column tiles times chunks of slices, about four blocks an SM (a block loops over its chunk's
  // slices when there are more). Only db: one tile, and x is not read.
  const int tiles = dweight.defined() ? (in + kTileCols - 1) / kTileCols : 1;
  const int64_t slices = (rows + kSliceRows - 1) / kSliceRows;
  const int chunks = static_cast<int>(std::min<int64_t>(slices, std::max(1, 4 * multiprocessor_count() / tiles)));
  float* partials = nullptr;
  if (chunks > 1) partials = column_scratch(chunks, static_cast<int64_t>(tiles) * kTileSlots, 0).partials;
  const GradSink<__nv_bfloat16> weight_sink = grad_sink<__nv_bfloat16>(dweight), bias_sink = grad_sink<__nv_bfloat16>(dbias);
  launch_dependent(narrow_linear_params_kernel, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)),
                   kParamThreads, 0, dy.data<__nv_bfloat16>(), x.data<__nv_bfloat16>(), rows, in, out, weight_sink,
                   bias_sink, partials);
  FT_CUDA_CHECK_LAUNCH("narrow_linear_params_kernel");
  if (chunks == 1) return;
  const int slots = tiles * kTileSlots;
  launch_dependent(narrow_linear_params_sum_kernel, (slots + kSumThreads - 1) / kSumThreads, kSumThreads, 0, partials,
                   chunks, tiles, in, out, weight_sink, bias_sink);
  FT_CUDA_CHECK_LAUNCH("narrow_linear_params_sum_kernel");
}

}  // namespace ft::cuda
