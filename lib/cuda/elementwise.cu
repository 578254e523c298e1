// Primitive elementwise kernels: one simple kernel per op family, the unfused building blocks.
// The per-element formulas come from lib/ops/elementwise_math.h, shared with the CPU loops.
#include "lib/cuda/launchers.h"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"

namespace ft::cuda {

namespace {

template <class T>
__global__ void unary_kernel(UnaryOp op, const T* x, T* out, int64_t n, acc_t<T> p, acc_t<T> q) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = from_acc<T>(apply_unary<acc_t<T>>(op, to_acc(x[i]), p, q));
}

template <class T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, int64_t n, BroadcastPlan plan) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = from_acc<T>(apply_binary(op, to_acc(a[plan.operand_index(0, i)]), to_acc(b[plan.operand_index(1, i)])));
}

__global__ void compare_kernel(CompareOp op, const void* a, const void* b, DType dtype, uint8_t* out, int64_t n,
                               BroadcastPlan plan) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = apply_compare(op, load_any(a, dtype, plan.operand_index(0, i)), load_any(b, dtype, plan.operand_index(1, i)));
}

// where moves elements unchanged, so only their width matters.
template <class Word>
__global__ void where_kernel(const uint8_t* cond, const Word* a, const Word* b, Word* out, int64_t n, BroadcastPlan plan) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = cond[plan.operand_index(0, i)] ? a[plan.operand_index(1, i)] : b[plan.operand_index(2, i)];
}

__global__ void cast_kernel(const void* x, DType from, void* out, DType to, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(out, to, i, load_any(x, from, i));
}

// Gradient accumulation into f32 views: 4 elements a thread, the source converted as read.
template <class S>
__global__ void accumulate_kernel(const S* src, float* dst, int64_t n, bool overwrite, const float* scale) {
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
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(out, dtype, i, arange ? static_cast<double>(i) : value);
}

__global__ void philox_uniform_kernel(float* out, int64_t n, uint64_t seed, const int64_t* offset_ptr) {
  const uint64_t offset = static_cast<uint64_t>(*offset_ptr);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = philox::uniform(seed, offset, static_cast<uint64_t>(i));
}

__global__ void philox_take_kernel(int64_t* counter, int64_t* used, int64_t step) {
  *used = *counter;
  *counter += step;
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out, double p, double q) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_floating(x.dtype(), "unary op", [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T><<<elementwise_blocks(n, kThreads), kThreads, 0, stream()>>>(
        op, x.data<T>(), out.data<T>(), n, static_cast<acc_t<T>>(p), static_cast<acc_t<T>>(q));
  });
  FT_CUDA_CHECK_LAUNCH("unary_kernel");
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_floating(a.dtype(), "binary op", [&](auto tag) {
    using T = decltype(tag);
    binary_kernel<T><<<elementwise_blocks(n, kThreads), kThreads, 0, stream()>>>(op, a.data<T>(), b.data<T>(),
                                                                                  out.data<T>(), n, plan);
  });
  FT_CUDA_CHECK_LAUNCH("binary_kernel");
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan) {
  const int64_t n = out.numel();
  if (n == 0) return;
  compare_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream()>>>(op, a.data_ptr(), b.data_ptr(), a.dtype(),
                                                                             out.data<uint8_t>(), n, plan);
  FT_CUDA_CHECK_LAUNCH("compare_kernel");
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const unsigned blocks = elementwise_blocks(n, kThreads);
  const uint8_t* c = cond.data<uint8_t>();
  switch (dtype_size(a.dtype())) {
    case 1: where_kernel<<<blocks, kThreads, 0, stream()>>>(c, a.data<uint8_t>(), b.data<uint8_t>(), out.data<uint8_t>(), n, plan); break;
    case 2: where_kernel<<<blocks, kThreads, 0, stream()>>>(c, a.data<uint16_t>(), b.data<uint16_t>(), out.data<uint16_t>(), n, plan); break;
    case 4: where_kernel<<<blocks, kThreads, 0, stream()>>>(c, a.data<uint32_t>(), b.data<uint32_t>(), out.data<uint32_t>(), n, plan); break;
    default: where_kernel<<<blocks, kThreads, 0, stream()>>>(c, a.data<uint64_t>(), b.data<uint64_t>(), out.data<uint64_t>(), n, plan); break;
  }
  FT_CUDA_CHECK_LAUNCH("where_kernel");
}

void cast(const Tensor& x, const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  cast_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream()>>>(x.data_ptr(), x.dtype(), out.data_ptr(),
                                                                          out.dtype(), n);
  FT_CUDA_CHECK_LAUNCH("cast_kernel");
}

void accumulate(const Tensor& src, const Tensor& dst, bool overwrite, const Tensor& scale) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const float* factor = scale.defined() ? scale.data<float>() : nullptr;
  const auto aligned = [](const Tensor& t, size_t bytes) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0; };
  const bool packed = dst.dtype() == DType::F32 && aligned(dst, 16) &&
                      ((src.dtype() == DType::F32 && aligned(src, 16)) || (src.dtype() == DType::BF16 && aligned(src, 8)));
  const unsigned blocks = elementwise_blocks((n + 3) / 4, kThreads);
  if (packed && src.dtype() == DType::BF16) {
    accumulate_kernel<<<blocks, kThreads, 0, stream()>>>(src.data<__nv_bfloat16>(), dst.data<float>(), n, overwrite, factor);
  } else if (packed) {
    accumulate_kernel<<<blocks, kThreads, 0, stream()>>>(src.data<float>(), dst.data<float>(), n, overwrite, factor);
  } else {
    accumulate_any_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream()>>>(
        src.data_ptr(), src.dtype(), dst.data_ptr(), dst.dtype(), n, overwrite, factor);
  }
  FT_CUDA_CHECK_LAUNCH("accumulate_kernel");
}

void fill(const Tensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  fill_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream()>>>(out.data_ptr(), out.dtype(), n, value, false);
  FT_CUDA_CHECK_LAUNCH("fill_kernel");
}

void arange(const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  fill_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream()>>>(out.data_ptr(), out.dtype(), n, 0.0, true);
  FT_CUDA_CHECK_LAUNCH("fill_kernel");
}

void philox_uniform(const Tensor& out, uint64_t seed, const Tensor& offset) {
  const int64_t n = out.numel();
  philox_uniform_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream()>>>(out.data<float>(), n, seed,
                                                                                    offset.data<int64_t>());
  FT_CUDA_CHECK_LAUNCH("philox_uniform_kernel");
}

void philox_take(const Tensor& counter, const Tensor& used, uint64_t step) {
  philox_take_kernel<<<1, 1, 0, stream()>>>(counter.data<int64_t>(), used.data<int64_t>(), static_cast<int64_t>(step));
  FT_CUDA_CHECK_LAUNCH("philox_take_kernel");
}

}  // namespace ft::cuda
