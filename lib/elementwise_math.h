// Per-element formulas of the elementwise primitives, written once for the CPU loops and the
// CUDA kernels. Also the broadcast plan both paths use to map an output index to operands.
#pragma once
#include <cmath>
#include <cstdint>

#include "lib/hostdevice.h"

namespace ft {

enum class UnaryOp : uint8_t { Neg, Exp, Log, Sqrt, Rsqrt, Tanh, Relu, Pow, Affine, Erf, GeluTanh };
/// GeluTanhGrad(x, g) = g · gelu'(x), GELU's backward as one op (eager frameworks' gelu_backward).
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, GeluTanhGrad };
enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
/// The activations fused ops apply (lib/ops/activation/activation.h builds their twins).
enum class Activation : uint8_t {
  None,
  ReLU,
  GELU,     // tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  GELUErf,  // exact form: 0.5·x·(1 + erf(x/√2))
  SiLU,     // x·sigmoid(x)
};

/// GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), and its derivative, with the
/// tanh given (the fused CUDA kernels pass the hardware approximation for bf16 results).
struct StdTanh {
  template <class A>
  FT_HOST_DEVICE A operator()(A v) const { return std::tanh(v); }
};
// Written as u = x·(k + k·c·x²), so that each takes few multiply-adds: the derivative is about 10
// instructions with the tanh where the expanded form took 16, and the fused norm backward runs
// it once per element.
constexpr double kGeluK = 0.7978845608028654;  // √(2/π)
constexpr double kGeluC = 0.044715;
template <class A, class Tanh = StdTanh>
FT_HOST_DEVICE A gelu_tanh_of(A x, Tanh tanh_fn = {}) {
  const A half_x = A(0.5) * x;
  return half_x + half_x * tanh_fn(x * (A(kGeluK) + A(kGeluK * kGeluC) * (x * x)));
}
/// gelu'(x) = ½(1 + t) + ½·x·u'·(1 − t²), t = tanh(u), u' = k·(1 + 3c·x²).
template <class A, class Tanh = StdTanh>
FT_HOST_DEVICE A gelu_tanh_derivative(A x, Tanh tanh_fn = {}) {
  const A x2 = x * x;
  const A t = tanh_fn(x * (A(kGeluK) + A(kGeluK * kGeluC) * x2));
  const A half_x_du = x * (A(0.5 * kGeluK) + A(1.5 * kGeluK * kGeluC) * x2);
  return (A(0.5) + A(0.5) * t) + half_x_du * (A(1) - t * t);
}

/// Unary formula; Pow uses p as the exponent, Affine computes x * p + q.
template <class A>
FT_HOST_DEVICE A apply_unary(UnaryOp op, A x, A p, A q) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return A(1) / std::sqrt(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Relu: return x > A(0) ? x : A(0);
    case UnaryOp::Pow: return std::pow(x, p);
    case UnaryOp::Affine: return x * p + q;
    case UnaryOp::Erf: return std::erf(x);
    case UnaryOp::GeluTanh: return gelu_tanh_of(x);
  }
  return x;
}

template <class A>
FT_HOST_DEVICE A apply_binary(BinaryOp op, A a, A b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::GeluTanhGrad: return b * gelu_tanh_derivative(a);
  }
  return a;
}

template <class A>
FT_HOST_DEVICE bool apply_compare(CompareOp op, A a, A b) {
  switch (op) {
    case CompareOp::Eq: return a == b;
    case CompareOp::Ne: return a != b;
    case CompareOp::Lt: return a < b;
    case CompareOp::Le: return a <= b;
    case CompareOp::Gt: return a > b;
    case CompareOp::Ge: return a >= b;
  }
  return false;
}

/// Maps a flat output index to flat indices of up to three broadcast operands (numpy rules).
struct BroadcastPlan {
  static constexpr int kMaxDims = 8;
  static constexpr int kMaxOperands = 3;
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxOperands][kMaxDims] = {};  // 0 where the operand is broadcast
  bool same_shape[kMaxOperands] = {};           // operand has the output's shape: index = i

  FT_HOST_DEVICE int64_t operand_index(int operand, int64_t i) const {
    if (same_shape[operand]) return i;
    int64_t index = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t coord = i % size[d];
      i /= size[d];
      index += coord * stride[operand][d];
    }
    return index;
  }

  /// Merges neighbouring dims that every operand walks the same way (both contiguous, or both
  /// broadcast) and drops dims of size 1, so the per-element index math does one division per
  /// remaining dim: `x - max(x, keepdim)` over [B, NH, T, T] becomes [B·NH·T, T], one division
  /// instead of four. operand_index gives the same indices before and after.
  void coalesce() {
    int kept = 0;  // dims kept so far, innermost first, packed at the front
    int64_t new_size[kMaxDims];
    int64_t new_stride[kMaxOperands][kMaxDims];
    for (int d = ndim - 1; d >= 0; --d) {
      if (size[d] == 1) continue;  // its coordinate is always 0
      bool merges = kept > 0;
      for (int k = 0; k < kMaxOperands && merges; ++k)
        merges = stride[k][d] == new_stride[k][kept - 1] * new_size[kept - 1];
      if (merges) {
        new_size[kept - 1] *= size[d];
        continue;
      }
      new_size[kept] = size[d];
      for (int k = 0; k < kMaxOperands; ++k) new_stride[k][kept] = stride[k][d];
      ++kept;
    }
    ndim = kept;
    for (int d = 0; d < kMaxDims; ++d) {  // back to outermost first
      size[d] = d < kept ? new_size[kept - 1 - d] : 0;
      for (int k = 0; k < kMaxOperands; ++k) stride[k][d] = d < kept ? new_stride[k][kept - 1 - d] : 0;
    }
  }
};

/// n / d and n % d for a fixed d >= 1 and any n < 2^31, as a multiply-high and a shift with
/// precomputed magic numbers (Granlund and Montgomery's round-up method, as eager frameworks
/// index): the GPU emulates a 64-bit division in tens of instructions.
struct FastDivmod {
  uint32_t divisor = 1, magic = 1, shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  /// n + mulhi(n, magic) fits 32 bits because n < 2^31 and mulhi(n, magic) <= n.
  FT_HOST_DEVICE uint32_t div(uint32_t n) const {
    return static_cast<uint32_t>(((static_cast<uint64_t>(n) * magic >> 32) + n) >> shift);
  }
};

/// A BroadcastPlan's operand indices in 32-bit arithmetic, for outputs under 2^31 elements (the
/// CUDA kernels' common case; BroadcastPlan::operand_index covers the rest).
template <int N>
struct BroadcastIndex32 {
  static constexpr int kMaxDims = BroadcastPlan::kMaxDims;
  int ndim = 0;
  FastDivmod dim[kMaxDims];           // dim[0] is never divided by
  uint32_t stride[N][kMaxDims] = {};  // 0 where the operand is broadcast

  static bool fits(int64_t numel) { return numel < (int64_t{1} << 31); }

  explicit BroadcastIndex32(const BroadcastPlan& plan) : ndim(plan.ndim) {
    for (int d = 0; d < ndim; ++d) {
      dim[d] = FastDivmod(static_cast<uint32_t>(plan.size[d]));
      for (int k = 0; k < N; ++k) stride[k][d] = static_cast<uint32_t>(plan.stride[k][d]);
    }
  }

  FT_HOST_DEVICE void operator()(uint32_t i, uint32_t (&index)[N]) const {
    for (int k = 0; k < N; ++k) index[k] = 0;
    for (int d = ndim - 1; d >= 1; --d) {
      const uint32_t q = dim[d].div(i), coord = i - q * dim[d].divisor;
      for (int k = 0; k < N; ++k) index[k] += coord * stride[k][d];
      i = q;
    }
    for (int k = 0; k < N; ++k) index[k] += i * stride[k][0];  // the outermost dim needs no division
  }
};

}  // namespace ft
