// DLRM's dot interaction (lib/ops/dot_interaction.h): a block per sample keeps its F vectors in
// shared memory (f32, rows padded by one float so that the lanes of a warp reading different
// vectors at one column hit different banks). The forward writes the dense copy and the P pair
// products; the backward rebuilds the pair gradients as a symmetric F×F matrix in shared memory
// and multiplies it by the vectors. The Gram matrix and the [F, D] stack never reach global
// memory. Twin: cat, batched matmul, transpose, gather_rows, cat.
#include "lib/cuda/launchers.h"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/dot_interaction.h"

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

}  // namespace

bool dot_interaction_supported(int64_t features, int64_t d) {
  return features >= 2 && d >= 1 && features * (features - 1) / 2 < (int64_t{1} << 24) &&
         vectors_bytes(features, d) + pair_matrix_bytes(features) <= kMaxShared;
}

void dot_interaction_forward(const Tensor& dense, const Tensor& sparse, const Tensor& out) {
  const int64_t b = dense.size(0), d = dense.size(1), features = sparse.size(1) + 1;
  FT_CHECK(b < (int64_t{1} << 31), "dot_interaction: batch ", b, " exceeds the grid");
  dispatch_half_float(dense.dtype(), "dot_interaction", [&](auto tag) {
    using T = decltype(tag);
    dot_interaction_forward_kernel<T><<<static_cast<unsigned>(b), kInteractionThreads, vectors_bytes(features, d),
                                        stream()>>>(dense.data<T>(), sparse.data<T>(), out.data<T>(),
                                                    static_cast<int>(features), static_cast<int>(d));
  });
  FT_CUDA_CHECK_LAUNCH("dot_interaction_forward_kernel");
}

void dot_interaction_backward(const Tensor& grad, const Tensor& dense, const Tensor& sparse, const Tensor& dense_grad,
                              const Tensor& sparse_grad) {
  const int64_t b = dense.size(0), d = dense.size(1), features = sparse.size(1) + 1;
  dispatch_half_float(dense.dtype(), "dot_interaction backward", [&](auto tag) {
    using T = decltype(tag);
    dot_interaction_backward_kernel<T><<<static_cast<unsigned>(b), kInteractionThreads,
                                         vectors_bytes(features, d) + pair_matrix_bytes(features), stream()>>>(
        grad.data<T>(), dense.data<T>(), sparse.data<T>(), dense_grad.data<T>(), sparse_grad.data<T>(),
        static_cast<int>(features), static_cast<int>(d));
  });
  FT_CUDA_CHECK_LAUNCH("dot_interaction_backward_kernel");
}

}  // namespace ft::cuda
