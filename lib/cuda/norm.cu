// Fused LayerNorm / RMSNorm, with the optional residual add in front.
//
// Forward: a block per row (grid-stride over rows), threads owning 16-byte packs of columns. The
// row is read from HBM once; the statistics passes re-read it from L1. The residual sum is
// stored once and the normalized row written once; only mean and rstd (f32) are saved.
// Backward: the same layout; each thread keeps the weight and bias gradients of its own
// columns in shared memory (no two threads share a column, so no atomics and a fixed order),
// and the per-block partials are added by a small column kernel in block order. Replaces the
// twin's cast, mean, sub, mul, rsqrt and add kernels and their backward chains.
#include <cub/block/block_reduce.cuh>

#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/layer_norm.h"

namespace ft::cuda {

namespace {

constexpr int kMaxThreads = 512;

template <class T, int V>
struct RowAccess {
  int64_t cols;
  __device__ bool vector_ok() const { return V > 1; }
  // Visits columns [c, c + V) owned by this thread, in a fixed order.
  template <class F>
  __device__ void for_each(F&& f) const {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < cols; c += static_cast<int64_t>(blockDim.x) * V) f(c);
  }
};

template <int V, class T>
__device__ __forceinline__ void load_row(const T* p, int64_t c, float (&v)[V]) {
  if constexpr (V > 1) load_pack<T, V>(p + c, v);
  else v[0] = to_acc(p[c]);
}
template <int V, class T>
__device__ __forceinline__ void store_row(T* p, int64_t c, const float (&v)[V]) {
  if constexpr (V > 1) store_pack<T, V>(p + c, v);
  else p[c] = from_acc<T>(v[0]);
}

template <class Reduce>
__device__ __forceinline__ float block_sum(Reduce& reduce, float value, float* broadcast) {
  const float total = reduce.Sum(value);
  if (threadIdx.x == 0) *broadcast = total;
  __syncthreads();
  const float out = *broadcast;
  __syncthreads();
  return out;
}

// s = x (+ residual, rounded to T as the twin stores it).
template <int V, class T>
__device__ __forceinline__ void load_input(const T* x, const T* residual, int64_t c, float (&s)[V]) {
  load_row<V>(x, c, s);
  if (residual) {
    float r[V];
    load_row<V>(residual, c, r);
#pragma unroll
    for (int k = 0; k < V; ++k) s[k] = rounded<T>(s[k] + r[k]);
  }
}

template <class T, int V, bool kRms>
__global__ void __launch_bounds__(kMaxThreads) norm_forward_kernel(const T* x, const T* residual, const T* weight,
                                                                   const T* bias, T* sum, T* out, float* mean_out,
                                                                   float* rstd_out, int64_t rows, int64_t cols,
                                                                   float eps) {
  using Reduce = cub::BlockReduce<float, 32, cub::BLOCK_REDUCE_WARP_REDUCTIONS, kMaxThreads / 32>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ float broadcast;
  Reduce reduce(storage);
  const RowAccess<T, V> access{cols};
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* rr = residual ? residual + r * cols : nullptr;
    float mean = 0.0f;
    if constexpr (!kRms) {
      float part = 0.0f;
      access.for_each([&](int64_t c) {
        float s[V];
        load_input<V>(xr, rr, c, s);
#pragma unroll
        for (int k = 0; k < V; ++k) part += s[k];
      });
      mean = block_sum(reduce, part, &broadcast) / static_cast<float>(cols);
    }
    float part = 0.0f;
    access.for_each([&](int64_t c) {
      float s[V];
      load_input<V>(xr, rr, c, s);
#pragma unroll
      for (int k = 0; k < V; ++k) part += (s[k] - mean) * (s[k] - mean);
    });
    const float rstd = rsqrtf(block_sum(reduce, part, &broadcast) / static_cast<float>(cols) + eps);
    access.for_each([&](int64_t c) {
      float s[V], w[V], b[V] = {};
      load_input<V>(xr, rr, c, s);
      if (sum) store_row<V>(sum + r * cols, c, s);
      load_row<V>(weight, c, w);
      if (bias) load_row<V>(bias, c, b);
#pragma unroll
      for (int k = 0; k < V; ++k) s[k] = (s[k] - mean) * rstd * w[k] + b[k];
      store_row<V>(out + r * cols, c, s);
    });
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

// dx = rstd·(dy·w − mean(dy·w) − x̂·mean(dy·w·x̂)); RMS drops the first mean (x̂ = x·rstd).
template <class T, int V, bool kRms>
__global__ void __launch_bounds__(kMaxThreads) norm_backward_kernel(const T* dy, const T* x, const T* weight,
                                                                    const float* mean_in, const float* rstd_in,
                                                                    T* dx, float* partials, int64_t rows,
                                                                    int64_t cols) {
  using Reduce = cub::BlockReduce<float, 32, cub::BLOCK_REDUCE_WARP_REDUCTIONS, kMaxThreads / 32>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ float broadcast;
  extern __shared__ float column_acc[];  // [2, cols]: dweight then dbias, each column owned by one thread
  Reduce reduce(storage);
  const RowAccess<T, V> access{cols};
  access.for_each([&](int64_t c) {
#pragma unroll
    for (int k = 0; k < V; ++k) column_acc[c + k] = column_acc[cols + c + k] = 0.0f;
  });
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* gr = dy + r * cols;
    const float mean = kRms ? 0.0f : mean_in[r], rstd = rstd_in[r];
    float part_g = 0.0f, part_gx = 0.0f;
    access.for_each([&](int64_t c) {
      float xv[V], g[V], w[V];
      load_row<V>(xr, c, xv);
      load_row<V>(gr, c, g);
      load_row<V>(weight, c, w);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xhat = (xv[k] - mean) * rstd, gw = g[k] * w[k];
        part_g += gw;
        part_gx += gw * xhat;
        column_acc[c + k] += g[k] * xhat;
        column_acc[cols + c + k] += g[k];
      }
    });
    const float mean_g = kRms ? 0.0f : block_sum(reduce, part_g, &broadcast) / static_cast<float>(cols);
    const float mean_gx = block_sum(reduce, part_gx, &broadcast) / static_cast<float>(cols);
    access.for_each([&](int64_t c) {
      float xv[V], g[V], w[V];
      load_row<V>(xr, c, xv);
      load_row<V>(gr, c, g);
      load_row<V>(weight, c, w);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xhat = (xv[k] - mean) * rstd;
        g[k] = rstd * (g[k] * w[k] - mean_g - xhat * mean_gx);
      }
      store_row<V>(dx + r * cols, c, g);
    });
  }
  access.for_each([&](int64_t c) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      partials[blockIdx.x * 2 * cols + c + k] = column_acc[c + k];
      partials[blockIdx.x * 2 * cols + cols + c + k] = column_acc[cols + c + k];
    }
  });
}

// out[j] = Σ_b partials[b, j] in block order, for j over [2, cols] (dweight then dbias).
template <class T>
__global__ void sum_partials_kernel(const float* partials, int blocks, int64_t cols, T* dweight, T* dbias) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < 2 * cols; j += (int64_t)gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (int b = 0; b < blocks; ++b) acc += partials[b * 2 * cols + j];
    if (j < cols) {
      if (dweight) dweight[j] = from_acc<T>(acc);
    } else if (dbias) {
      dbias[j - cols] = from_acc<T>(acc);
    }
  }
}

int threads_for(int64_t groups) {
  const int64_t t = (groups + 31) / 32 * 32;
  return static_cast<int>(std::min<int64_t>(kMaxThreads, std::max<int64_t>(32, t)));
}

template <class Body>
void with_norm_config(NormKind kind, DType dtype, int64_t cols, std::initializer_list<const void*> pointers,
                      Body&& body) {
  dispatch_half_float(dtype, "norm", [&](auto tag) {
    using T = decltype(tag);
    auto pick_kind = [&](auto vec) {
      if (kind == NormKind::RMS) body(tag, vec, std::true_type{});
      else body(tag, vec, std::false_type{});
    };
    if (packable<T>(cols, pointers)) pick_kind(std::integral_constant<int, kPackSize<T>>{});
    else pick_kind(std::integral_constant<int, 1>{});
  });
}

}  // namespace

void norm_forward(NormKind kind, const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                  double eps, const Tensor& sum, const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  auto ptr = [](const Tensor& t) -> const void* { return t.defined() ? t.data_ptr() : nullptr; };
  with_norm_config(kind, x.dtype(), cols, {ptr(x), ptr(residual), ptr(weight), ptr(bias), ptr(sum), ptr(out)},
                   [&](auto tag, auto vec, auto rms) {
                     using T = decltype(tag);
                     constexpr int V = decltype(vec)::value;
                     const unsigned blocks =
                         static_cast<unsigned>(std::min<int64_t>(rows, 32LL * multiprocessor_count()));
                     norm_forward_kernel<T, V, decltype(rms)::value><<<blocks, threads_for(cols / V), 0, stream()>>>(
                         x.data<T>(), static_cast<const T*>(ptr(residual)), weight.data<T>(),
                         static_cast<const T*>(ptr(bias)), sum.defined() ? sum.data<T>() : nullptr, out.data<T>(),
                         mean.defined() ? mean.data<float>() : nullptr, rstd.data<float>(), rows, cols,
                         static_cast<float>(eps));
                     FT_CUDA_CHECK_LAUNCH("norm_forward_kernel");
                   });
}

void norm_backward(NormKind kind, const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, 2LL * multiprocessor_count()));
  const size_t smem = static_cast<size_t>(2 * cols) * sizeof(float);
  ColumnScratch scratch = column_scratch(blocks, 2 * cols, 1);
  with_norm_config(kind, x.dtype(), cols, {dy.data_ptr(), x.data_ptr(), weight.data_ptr(), dx.data_ptr()},
                   [&](auto tag, auto vec, auto rms) {
                     using T = decltype(tag);
                     constexpr int V = decltype(vec)::value;
                     auto kernel = norm_backward_kernel<T, V, decltype(rms)::value>;
                     if (smem > 48 * 1024)
                       FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          static_cast<int>(smem)));
                     kernel<<<blocks, threads_for(cols / V), smem, stream()>>>(
                         dy.data<T>(), x.data<T>(), weight.data<T>(), mean.defined() ? mean.data<float>() : nullptr,
                         rstd.data<float>(), dx.data<T>(), scratch.partials, rows, cols);
                     FT_CUDA_CHECK_LAUNCH("norm_backward_kernel");
                     if (dweight.defined() || dbias.defined()) {
                       sum_partials_kernel<T><<<elementwise_blocks(2 * cols, kThreads), kThreads, 0, stream()>>>(
                           scratch.partials, blocks, cols, dweight.defined() ? dweight.data<T>() : nullptr,
                           dbias.defined() ? dbias.data<T>() : nullptr);
                       FT_CUDA_CHECK_LAUNCH("sum_partials_kernel");
                     }
                   });
}

}  // namespace ft::cuda
