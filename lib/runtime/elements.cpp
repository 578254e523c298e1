// The element kernels of lib/runtime/elements.h: host loops here (OpenMP above 64 Ki elements),
// the CUDA kernels in cuda_elements.cu.
#include "lib/runtime/elements.h"

#include "lib/cpu_dispatch.h"
#include "lib/runtime.h"
#include "lib/runtime/cuda_elements.h"

namespace ft::runtime {

namespace {
constexpr int64_t kParallelOver = 65536;
}  // namespace

void fill_elements(void* dst, DType dtype, Device device, int64_t n, double value) {
  if (n == 0) return;
  if (device.is_cuda()) {
    if constexpr (kCudaBuild) cuda::fill_elements(dst, dtype, n, value);
    return;
  }
  cpu::dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(dst);
    for (int64_t i = 0; i < n; ++i) cpu::store(p, i, value);
  });
}

void arange_elements(void* dst, DType dtype, Device device, int64_t n) {
  if (n == 0) return;
  if (device.is_cuda()) {
    if constexpr (kCudaBuild) cuda::arange_elements(dst, dtype, n);
    return;
  }
  cpu::dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(dst);
    for (int64_t i = 0; i < n; ++i) cpu::store(p, i, static_cast<double>(i));
  });
}

void convert_elements(void* dst, DType to, const void* src, DType from, Device device, int64_t n) {
  if (n == 0) return;
  if (device.is_cuda()) {
    if constexpr (kCudaBuild) cuda::convert_elements(dst, to, src, from, n);
    return;
  }
  cpu::dispatch_all(from, [&](auto in_tag) {
    using In = decltype(in_tag);
    cpu::dispatch_all(to, [&](auto out_tag) {
      using Out = decltype(out_tag);
      const In* in = static_cast<const In*>(src);
      Out* out = static_cast<Out*>(dst);
#pragma omp parallel for if (n > kParallelOver)
      for (int64_t i = 0; i < n; ++i) cpu::store(out, i, cpu::load(in, i));
    });
  });
}

void sum_elements(void* out, const void* a, const void* b, DType dtype, Device device, int64_t n) {
  if (n == 0) return;
  if (device.is_cuda()) {
    if constexpr (kCudaBuild) cuda::sum_elements(out, a, b, dtype, n);
    return;
  }
  cpu::dispatch_floating(dtype, "sum_elements", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* o = static_cast<T*>(out);
#pragma omp parallel for if (n > kParallelOver)
    for (int64_t i = 0; i < n; ++i) cpu::store(o, i, cpu::load(pa, i) + cpu::load(pb, i));
  });
}

void accumulate_elements(void* dst, DType to, const void* src, DType from, Device device, int64_t n, bool overwrite,
                         const float* scale) {
  if (n == 0) return;
  if (device.is_cuda()) {
    if constexpr (kCudaBuild) cuda::accumulate_elements(dst, to, src, from, n, overwrite, scale);
    return;
  }
  const double factor = scale ? *scale : 1.0;
  cpu::dispatch_floating(to, "accumulate_elements", [&](auto dst_tag) {
    using D = decltype(dst_tag);
    cpu::dispatch_floating(from, "accumulate_elements", [&](auto src_tag) {
      using S = decltype(src_tag);
      using A = cpu::acc_t<D>;
      const S* in = static_cast<const S*>(src);
      D* out = static_cast<D*>(dst);
#pragma omp parallel for if (n > kParallelOver)
      for (int64_t i = 0; i < n; ++i) {
        const A v = static_cast<A>(cpu::load(in, i)) * static_cast<A>(factor);
        cpu::store(out, i, overwrite ? v : cpu::load(out, i) + v);
      }
    });
  });
}

}  // namespace ft::runtime
