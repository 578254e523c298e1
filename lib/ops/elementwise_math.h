// Per-element formulas of the elementwise primitives, written once for the CPU loops and the
// CUDA kernels. Also the broadcast plan both paths use to map an output index to operands.
#pragma once
#include <cmath>
#include <cstdint>

#include "lib/hostdevice.h"

namespace ft {

enum class UnaryOp : uint8_t { Neg, Exp, Log, Sqrt, Rsqrt, Tanh, Relu, Pow, Affine, Erf };
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };
enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

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

}  // namespace ft
