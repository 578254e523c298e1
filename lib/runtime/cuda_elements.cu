// CUDA element kernels of lib/runtime/elements.h. Conversions between floating dtypes and
// same-dtype sums go through the vectorized contiguous kernel (lib/cuda/contiguous.cuh);
// anything else (integer dtypes, f64 destinations of accumulation, unaligned views) element by
// element through double.
#include "lib/cuda/contiguous.cuh"
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/runtime/cuda_elements.h"

namespace ft::cuda {

namespace {

template <class A>
struct IdentityFn {
  __device__ A operator()(const A (&x)[1]) const { return x[0]; }
};
template <class A>
struct SumFn {
  __device__ A operator()(const A (&x)[2]) const { return x[0] + x[1]; }
};

__global__ void cast_any_kernel(const void* x, DType from, void* out, DType to, int64_t n) {
  begin_dependent_kernel();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(out, to, i, load_any(x, from, i));
}

// Gradient accumulation into f32 views: 4 elements a thread, the source converted as read.
template <class S>
__global__ void accumulate_kernel(const S* src, float* dst, int64_t n, bool overwrite, const float* scale) {
  begin_dependent_kernel();
  const float factor = scale ? *scale : 1.0f;
  const int64_t packs = n / 4, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < packs; q += stride) {
    float s[4], d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_pack<S, 4>(src + 4 * q, s);
    if (!overwrite) load_pack<float, 4>(dst + 4 * q, d);
#pragma unroll
    for (int k = 0; k < 4; ++k) d[k] += s[k] * factor;
    store_pack<float, 4>(dst + 4 * q, d);
  }
  for (int64_t i = 4 * packs + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = (overwrite ? 0.0f : dst[i]) + to_acc(src[i]) * factor;
}

// Any other pairing (f64 destinations, unaligned views): element by element.
__global__ void accumulate_any_kernel(const void* src, DType from, void* dst, DType to, int64_t n, bool overwrite,
                                      const float* scale) {
  begin_dependent_kernel();
  const double factor = scale ? *scale : 1.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if (to == DType::F32) {  // f32 arithmetic, as the packed kernel does
      float* d = static_cast<float*>(dst);
      d[i] = (overwrite ? 0.0f : d[i]) + static_cast<float>(load_any(src, from, i)) * static_cast<float>(factor);
    } else {
      store_any(dst, to, i, (overwrite ? 0.0 : load_any(dst, to, i)) + load_any(src, from, i) * factor);
    }
  }
}

__global__ void fill_kernel(void* out, DType dtype, int64_t n, double value, bool arange) {
  begin_dependent_kernel();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(out, dtype, i, arange ? static_cast<double>(i) : value);
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void fill_elements(void* dst, DType dtype, int64_t n, double value) {
  launch_dependent(fill_kernel, elementwise_blocks(n, kThreads), kThreads, 0, dst, dtype, n, value, false);
  FT_CUDA_CHECK_LAUNCH("fill_kernel");
}

void arange_elements(void* dst, DType dtype, int64_t n) {
  launch_dependent(fill_kernel, elementwise_blocks(n, kThreads), kThreads, 0, dst, dtype, n, 0.0, true);
  FT_CUDA_CHECK_LAUNCH("fill_kernel");
}

void convert_elements(void* dst, DType to, const void* src, DType from, int64_t n) {
  if (is_floating(from) && is_floating(to)) {
    // Between floating dtypes (the casts a bf16 model makes): typed, with vector accesses.
    dispatch_floating(from, "convert", [&](auto from_tag) {
      using From = decltype(from_tag);
      dispatch_floating(to, "convert", [&](auto to_tag) {
        using To = decltype(to_tag);
        launch_contiguous<From, To, 1>({{static_cast<const From*>(src)}, {false}}, static_cast<To*>(dst), n,
                                       IdentityFn<mixed_acc_t<From, To>>{});
      });
    });
  } else {
    launch_dependent(cast_any_kernel, elementwise_blocks(n, kThreads), kThreads, 0, src, from, dst, to, n);
  }
  FT_CUDA_CHECK_LAUNCH("cast kernel");
}

void sum_elements(void* out, const void* a, const void* b, DType dtype, int64_t n) {
  dispatch_floating(dtype, "sum_elements", [&](auto tag) {
    using T = decltype(tag);
    launch_contiguous<T, T, 2>({{static_cast<const T*>(a), static_cast<const T*>(b)}, {false, false}},
                               static_cast<T*>(out), n, SumFn<acc_t<T>>{});
  });
  FT_CUDA_CHECK_LAUNCH("sum kernel");
}

void accumulate_elements(void* dst, DType to, const void* src, DType from, int64_t n, bool overwrite,
                         const float* scale) {
  const bool packed = to == DType::F32 && aligned(dst, 16) &&
                      ((from == DType::F32 && aligned(src, 16)) || (from == DType::BF16 && aligned(src, 8)));
  const unsigned blocks = elementwise_blocks((n + 3) / 4, kThreads);
  if (packed && from == DType::BF16) {
    launch_dependent(accumulate_kernel<__nv_bfloat16>, blocks, kThreads, 0, static_cast<const __nv_bfloat16*>(src),
                     static_cast<float*>(dst), n, overwrite, scale);
  } else if (packed) {
    launch_dependent(accumulate_kernel<float>, blocks, kThreads, 0, static_cast<const float*>(src),
                     static_cast<float*>(dst), n, overwrite, scale);
  } else {
    launch_dependent(accumulate_any_kernel, elementwise_blocks(n, kThreads), kThreads, 0, src, from, dst, to, n,
                     overwrite, scale);
  }
  FT_CUDA_CHECK_LAUNCH("accumulate_kernel");
}

}  // namespace ft::cuda
