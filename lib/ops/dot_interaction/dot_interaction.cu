// DLRM's dot interaction (lib/ops/dot_interaction/dot_interaction.h). The forward writes the dense copy and the
// P pair products of each sample's F vectors; the backward rebuilds the pair gradients as a
// symmetric F×F matrix S (zero diagonal) and multiplies it by the vectors: dX = S·X. The Gram
// matrix and the [F, D] stack never reach global memory.
//
// bf16, F ≤ 32, D a multiple of 16 (DLRM's shapes): a warp per sample on the tensor cores. The
// warp stages X (and S) in shared memory as bf16, multiplies with mma.sync m16n8k16 (f32
// accumulators: the products of bf16 values are exact, as in the f32 kernel below), and writes
// its output row through shared memory so that the stores are coalesced. Block-per-sample f32
// arithmetic on shared memory, the other shapes' path, spent 2 loads of shared memory per FMA
// and ran at a sixth of HBM bandwidth at dlrm-kaggle's shapes.
//
// Other shapes and dtypes: a block per sample keeps its F vectors in shared memory (f32, rows
// padded by one float so that the lanes of a warp reading different vectors at one column hit
// different banks). Twin: cat, batched matmul, transpose, gather_rows, cat.
#include "lib/ops/dot_interaction/dot_interaction_cuda.h"

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/mma.cuh"
#include "lib/cuda/runtime.h"

namespace ft::cuda {

namespace {

constexpr int kInteractionThreads = 128;
constexpr size_t kMaxShared = 48 * 1024;

size_t vectors_bytes(int64_t features, int64_t d) { return static_cast<size_t>(features * (d + 1)) * sizeof(float); }
size_t pair_matrix_bytes(int64_t features) { return static_cast<size_t>(features * (features + 1)) * sizeof(float); }

/// The (i, j), i > j, of pair p in row-major lower-triangle order.
__device__ __forceinline__ void pair_of(int p, int& i, int& j) {
  i = static_cast<int>((1.0f + sqrtf(1.0f + 8.0f * static_cast<float>(p))) * 0.5f);
  while (i * (i - 1) / 2 > p) --i;
  while ((i + 1) * i / 2 <= p) ++i;
  j = p - i * (i - 1) / 2;
}

/// Sample b's F vectors into shared memory: x[0] = dense[b], x[i] = sparse[b, i − 1].
template <class T>
__device__ __forceinline__ void load_vectors(const T* dense, const T* sparse, int64_t b, int features, int d,
                                             float* x) {
  const int stride = d + 1;
  for (int e = threadIdx.x; e < features * d; e += blockDim.x) {
    const int i = e / d, c = e % d;
    const T v = i == 0 ? dense[b * d + c] : sparse[(b * (features - 1) + (i - 1)) * int64_t{d} + c];
    x[i * stride + c] = to_acc(v);
  }
}

template <class T>
__global__ void dot_interaction_forward_kernel(const T* dense, const T* sparse, T* out, int features, int d) {
  begin_dependent_kernel();
  extern __shared__ float x[];
  const int64_t b = blockIdx.x;
  const int stride = d + 1, pairs = features * (features - 1) / 2;
  load_vectors(dense, sparse, b, features, d, x);
  __syncthreads();
  T* row = out + b * (d + pairs);
  for (int c = threadIdx.x; c < d; c += blockDim.x) row[c] = from_acc<T>(x[c]);
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    int i, j;
    pair_of(p, i, j);
    float s = 0.0f;
    for (int c = 0; c < d; ++c) s += x[i * stride + c] * x[j * stride + c];
    row[d + p] = from_acc<T>(s);
  }
}

template <class T>
__global__ void dot_interaction_backward_kernel(const T* grad, const T* dense, const T* sparse, T* dense_grad,
                                                T* sparse_grad, int features, int d) {
  begin_dependent_kernel();
  extern __shared__ float x[];
  float* pair_grad = x + features * (d + 1);  // [F][F + 1], symmetric, zero diagonal
  const int64_t b = blockIdx.x;
  const int stride = d + 1, pairs = features * (features - 1) / 2, gstride = features + 1;
  load_vectors(dense, sparse, b, features, d, x);
  const T* g = grad + b * (d + pairs);
  for (int i = threadIdx.x; i < features; i += blockDim.x) pair_grad[i * gstride + i] = 0.0f;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    int i, j;
    pair_of(p, i, j);
    const float v = to_acc(g[d + p]);
    pair_grad[i * gstride + j] = v;
    pair_grad[j * gstride + i] = v;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < features * d; e += blockDim.x) {
    const int i = e / d, c = e % d;
    float s = 0.0f;
    for (int j = 0; j < features; ++j) s += pair_grad[i * gstride + j] * x[j * stride + c];
    if (i == 0) dense_grad[b * d + c] = from_acc<T>(s + to_acc(g[c]));
    else sparse_grad[(b * (features - 1) + (i - 1)) * int64_t{d} + c] = from_acc<T>(s);
  }
}

// ---- bf16 on the tensor cores: a warp per sample ----

constexpr int kMmaWarps = 4;       // samples per block
constexpr int kMmaMaxFeatures = 32;
constexpr int kMmaMaxDim = 128;    // 4 warps' shared memory then stays under the default 48 KB
constexpr int kRowPad = 8;         // bf16 per row of padding: ldmatrix's 8 rows then hit distinct banks

/// A warp's shared memory: X [32][D + 8] bf16 (rows F..31 zero), then the pair buffer: the
/// output's P products (forward) or S [32][32 + 8] bf16 (backward).
__host__ __device__ inline int mma_x_stride(int d) { return d + kRowPad; }
__host__ __device__ inline size_t mma_warp_bytes(int d, int features) {
  const size_t x = size_t{kMmaMaxFeatures} * static_cast<size_t>(mma_x_stride(d)) * 2;
  const size_t pairs = static_cast<size_t>(features * (features - 1) / 2) * 2;
  const size_t s = size_t{kMmaMaxFeatures} * (kMmaMaxFeatures + kRowPad) * 2;
  return (x + (pairs > s ? pairs : s) + 15) / 16 * 16;  // the next warp's X starts 16-byte aligned
}

bool mma_path(const Tensor& dense, const Tensor& sparse, int64_t features, int64_t d) {
  return dense.dtype() == DType::BF16 && features <= kMmaMaxFeatures && d % 16 == 0 && d <= kMmaMaxDim &&
         reinterpret_cast<uintptr_t>(dense.data_ptr()) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(sparse.data_ptr()) % 16 == 0;
}

/// Sample b's F vectors into the warp's X (16-byte loads), rows F..rows-1 zeroed.
__device__ __forceinline__ void stage_vectors_bf16(const __nv_bfloat16* dense, const __nv_bfloat16* sparse, int64_t b,
                                                   int features, int rows, int d, __nv_bfloat16* x, int lane) {
  const int chunks = d / 8, stride = mma_x_stride(d);  // 8 bf16 per 16-byte chunk
  for (int e = lane; e < rows * chunks; e += 32) {
    const int i = e / chunks, c = (e % chunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (i == 0) v = *reinterpret_cast<const uint4*>(dense + b * d + c);
    else if (i < features)
      v = *reinterpret_cast<const uint4*>(sparse + (b * (features - 1) + (i - 1)) * int64_t{d} + c);
    *reinterpret_cast<uint4*>(x + i * stride + c) = v;
  }
}

/// The 16-row A fragment at rows [r0, r0 + 16), columns [k0, k0 + 16) of a row-major bf16 tile.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const __nv_bfloat16* tile, int stride, int r0, int k0,
                                       int lane) {
  mma::load_matrix_x4(a, tile + (r0 + lane % 16) * stride + k0 + (lane / 16) * 8);
}

__global__ void __launch_bounds__(kMmaWarps * 32)
    dot_interaction_forward_mma_kernel(const __nv_bfloat16* dense, const __nv_bfloat16* sparse, __nv_bfloat16* out,
                                       int64_t batch, int features, int d) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) unsigned char shared[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.x * int64_t{kMmaWarps} + warp;
  if (b >= batch) return;  // a whole warp leaves; the warps share no barrier
  const int stride = mma_x_stride(d), pairs = features * (features - 1) / 2;
  const int rows = features <= 16 ? 16 : 32;
  auto* x = reinterpret_cast<__nv_bfloat16*>(shared + static_cast<size_t>(warp) * mma_warp_bytes(d, features));
  __nv_bfloat16* products = x + kMmaMaxFeatures * stride;
  stage_vectors_bf16(dense, sparse, b, features, rows, d, x, lane);
  __syncwarp();
  const int g = lane / 4, q = lane % 4;
  // Gram blocks of 16×16 on or below the diagonal; each is two m16n8 tiles.
  for (int mt = 0; mt < rows / 16; ++mt)
    for (int nt = 0; nt <= mt; ++nt) {
      float c[2][4] = {};
      for (int k0 = 0; k0 < d; k0 += 16) {
        uint32_t a[4], bb[4];
        load_a(a, x, stride, mt * 16, k0, lane);
        // B = Xᵀ: the rows of X are B's columns, so X row-major is B "col"; matrices 0/1 are the
        // first n-tile's k halves, 2/3 the second's.
        mma::load_matrix_x4(bb, x + (nt * 16 + (lane / 16) * 8 + lane % 8) * stride + k0 + ((lane / 8) % 2) * 8);
        mma::mma_bf16(c[0], a, bb[0], bb[1]);
        mma::mma_bf16(c[1], a, bb[2], bb[3]);
      }
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = mt * 16 + g + (e / 2) * 8, j = nt * 16 + s * 8 + 2 * q + e % 2;
          if (i < features && j < i) products[i * (i - 1) / 2 + j] = __float2bfloat16(c[s][e]);
        }
    }
  __syncwarp();
  // The output row [dense | products], contiguous: consecutive lanes store consecutive elements.
  __nv_bfloat16* row = out + b * (d + pairs);
  for (int e = lane; e < d + pairs; e += 32) row[e] = e < d ? x[e] : products[e - d];
}

__global__ void __launch_bounds__(kMmaWarps * 32)
    dot_interaction_backward_mma_kernel(const __nv_bfloat16* grad, const __nv_bfloat16* dense,
                                        const __nv_bfloat16* sparse, __nv_bfloat16* dense_grad,
                                        __nv_bfloat16* sparse_grad, int64_t batch, int features, int d) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) unsigned char shared[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.x * int64_t{kMmaWarps} + warp;
  if (b >= batch) return;
  const int stride = mma_x_stride(d), pairs = features * (features - 1) / 2;
  const int rows = features <= 16 ? 16 : 32, s_stride = kMmaMaxFeatures + kRowPad;
  auto* x = reinterpret_cast<__nv_bfloat16*>(shared + static_cast<size_t>(warp) * mma_warp_bytes(d, features));
  __nv_bfloat16* sym = x + kMmaMaxFeatures * stride;
  stage_vectors_bf16(dense, sparse, b, features, rows, d, x, lane);
  for (int e = lane; e < kMmaMaxFeatures * s_stride / 8; e += 32) reinterpret_cast<uint4*>(sym)[e] = make_uint4(0, 0, 0, 0);
  __syncwarp();
  const __nv_bfloat16* g_row = grad + b * (d + pairs);
  for (int p = lane; p < pairs; p += 32) {  // coalesced reads of the pair gradients
    int i, j;
    pair_of(p, i, j);
    const __nv_bfloat16 v = g_row[d + p];
    sym[i * s_stride + j] = v;
    sym[j * s_stride + i] = v;
  }
  __syncwarp();
  const int g = lane / 4, q = lane % 4;
  // dX = S·X, 16 rows × 16 columns at a time, stored straight from the accumulators: a row's
  // 16 columns are 32 contiguous bytes, which L2 gathers into whole sectors before they go out.
  for (int mt = 0; mt < rows / 16; ++mt) {
    uint32_t a[kMmaMaxFeatures / 16][4];  // S's rows [16mt, 16mt + 16), every k: read once
#pragma unroll
    for (int ks = 0; ks < kMmaMaxFeatures / 16; ++ks)
      if (ks * 16 < rows) load_a(a[ks], sym, s_stride, mt * 16, ks * 16, lane);
    for (int nt = 0; nt < d / 16; ++nt) {
      float c[2][4] = {};
#pragma unroll
      for (int ks = 0; ks < kMmaMaxFeatures / 16; ++ks) {
        if (ks * 16 >= rows) break;
        uint32_t bb[4];
        // B = X stored [k][n]: transposed loads; matrices 0/1 the k halves of the first n-tile,
        // 2/3 of the second.
        mma::load_matrix_x4_trans(bb, x + (ks * 16 + ((lane / 8) % 2) * 8 + lane % 8) * stride + nt * 16 +
                                          (lane / 16) * 8);
        mma::mma_bf16(c[0], a[ks], bb[0], bb[1]);
        mma::mma_bf16(c[1], a[ks], bb[2], bb[3]);
      }
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = mt * 16 + g + h * 8, col = nt * 16 + s * 8 + 2 * q;
          if (i >= features) continue;
          float lo = c[s][2 * h], hi = c[s][2 * h + 1];
          __nv_bfloat16* dst;
          if (i == 0) {  // the dense vector's gradient also gets the upstream copy's
            lo += __bfloat162float(g_row[col]);
            hi += __bfloat162float(g_row[col + 1]);
            dst = dense_grad + b * d + col;
          } else {
            dst = sparse_grad + (b * (features - 1) + (i - 1)) * int64_t{d} + col;
          }
          *reinterpret_cast<uint32_t*>(dst) = mma::pack_bf16(lo, hi);
        }
    }
  }
}

}  // namespace

bool dot_interaction_supported(int64_t features, int64_t d) {
  return features >= 2 && d >= 1 && features * (features - 1) / 2 < (int64_t{1} << 24) &&
         vectors_bytes(features, d) + pair_matrix_bytes(features) <= kMaxShared;
}

void dot_interaction_forward(const Tensor& dense, const Tensor& sparse, const Tensor& out) {
  const int64_t b = dense.size(0), d = dense.size(1), features = sparse.size(1) + 1;
  FT_CHECK(b < (int64_t{1} << 31), "dot_interaction: batch ", b, " exceeds the grid");
  if (mma_path(dense, sparse, features, d)) {
    const unsigned blocks = static_cast<unsigned>((b + kMmaWarps - 1) / kMmaWarps);
    launch_dependent(dot_interaction_forward_mma_kernel, blocks, kMmaWarps * 32,
                     kMmaWarps * mma_warp_bytes(static_cast<int>(d), static_cast<int>(features)),
                     dense.data<__nv_bfloat16>(), sparse.data<__nv_bfloat16>(), out.data<__nv_bfloat16>(), b,
                     static_cast<int>(features), static_cast<int>(d));
    FT_CUDA_CHECK_LAUNCH("dot_interaction_forward_mma_kernel");
    return;
  }
  dispatch_half_float(dense.dtype(), "dot_interaction", [&](auto tag) {
    using T = decltype(tag);
    launch_dependent(dot_interaction_forward_kernel<T>, static_cast<unsigned>(b), kInteractionThreads,
                     vectors_bytes(features, d), dense.data<T>(), sparse.data<T>(), out.data<T>(),
                     static_cast<int>(features), static_cast<int>(d));
  });
  FT_CUDA_CHECK_LAUNCH("dot_interaction_forward_kernel");
}

void dot_interaction_backward(const Tensor& grad, const Tensor& dense, const Tensor& sparse, const Tensor& dense_grad,
                              const Tensor& sparse_grad) {
  const int64_t b = dense.size(0), d = dense.size(1), features = sparse.size(1) + 1;
  if (mma_path(dense, sparse, features, d)) {
    const unsigned blocks = static_cast<unsigned>((b + kMmaWarps - 1) / kMmaWarps);
    launch_dependent(dot_interaction_backward_mma_kernel, blocks, kMmaWarps * 32,
                     kMmaWarps * mma_warp_bytes(static_cast<int>(d), static_cast<int>(features)),
                     grad.data<__nv_bfloat16>(), dense.data<__nv_bfloat16>(), sparse.data<__nv_bfloat16>(),
                     dense_grad.data<__nv_bfloat16>(), sparse_grad.data<__nv_bfloat16>(), b, static_cast<int>(features),
                     static_cast<int>(d));
    FT_CUDA_CHECK_LAUNCH("dot_interaction_backward_mma_kernel");
    return;
  }
  dispatch_half_float(dense.dtype(), "dot_interaction backward", [&](auto tag) {
    using T = decltype(tag);
    launch_dependent(dot_interaction_backward_kernel<T>, static_cast<unsigned>(b), kInteractionThreads,
                     vectors_bytes(features, d) + pair_matrix_bytes(features), grad.data<T>(), dense.data<T>(),
                     sparse.data<T>(), dense_grad.data<T>(), sparse_grad.data<T>(), static_cast<int>(features),
                     static_cast<int>(d));
  });
  FT_CUDA_CHECK_LAUNCH("dot_interaction_backward_kernel");
}

}  // namespace ft::cuda
