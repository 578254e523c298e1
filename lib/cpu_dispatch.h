// Dtype dispatch for the CPU loops: calls f with a value of the element type.
// bf16 and f32 elements are computed in f32; f64 and the integer types in f64, which holds
// every i32 exactly (and i64 ids up to 2^53).
#pragma once
#include <cstdint>
#include <type_traits>

#include "lib/dtype.h"
#include "lib/error.h"

namespace ft::cpu {

template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, bf16>, float, double>;

template <class T>
inline acc_t<T> load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bf16>) return static_cast<float>(p[i]);
  else return static_cast<acc_t<T>>(p[i]);
}

template <class T, class A>
inline void store(T* p, int64_t i, A value) {
  if constexpr (std::is_same_v<T, bf16>) p[i] = bf16::from_double(static_cast<double>(value));
  else p[i] = static_cast<T>(value);
}

template <class F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::BF16: return f(bf16{});
    default: FT_FAIL(op, ": expected a floating dtype (f32, f64, bf16), got ", dtype_name(dtype));
  }
}

template <class F>
void dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::BF16: return f(bf16{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::U8: return f(uint8_t{});
  }
}

}  // namespace ft::cpu
