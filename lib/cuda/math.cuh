// Device helpers shared by the primitive kernels and the fused kernels: element conversion,
// dtype dispatch, activation formulas and Philox. No kernel body lives here.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "lib/dtype.h"
#include "lib/error.h"
#include "lib/philox.h"

namespace ft::cuda {

// Elements are computed in f32, except f64 in f64.
template <class T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <class T> using acc_t = typename AccOf<T>::type;

__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }

template <class T> __device__ __forceinline__ T from_acc(float v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <class T> __device__ __forceinline__ T from_acc(double v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(double v) { return __double2bfloat16(v); }

/// Reads element i of any dtype as a double (casts and comparisons, where speed is secondary).
__device__ __forceinline__ double load_any(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0.0;
}

__device__ __forceinline__ void store_any(void* p, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __double2bfloat16(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
  }
}

/// Integer ids of either width, as int64.
__device__ __forceinline__ int64_t load_id(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

/// GELU, tanh form, and its derivative (used by fused epilogue-free backward paths).
__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float k = 0.7978845608028654f;
  const float inner = k * (x + 0.044715f * x * x * x);
  const float t = tanhf(inner);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

/// Calls f with a value of the CUDA element type of a floating dtype.
template <class F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::BF16: return f(__nv_bfloat16{});
    default: FT_FAIL(op, ": expected a floating dtype (f32, f64, bf16), got ", dtype_name(dtype));
  }
}

constexpr int kThreads = 256;

}  // namespace ft::cuda
