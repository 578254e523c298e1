// Elementwise primitives: unary math, binary arithmetic with broadcasting, comparisons, where,
// casts. Each has a CPU loop and one simple CUDA kernel; backward is written in primitives.
//
// Binary operands broadcast numpy-style (a bias [C] against [N, C], a row statistic [N, 1]
// against [N, C]). Both operands must share dtype and device. Floating dtypes only, except
// comparisons and where, which take any dtype.
#pragma once
#include "lib/elementwise_math.h"
#include "lib/tensor.h"

#include <vector>

namespace ft {

/// How operands of the given shapes map onto an output of shape `out` (shapes that broadcast to
/// it), with neighbouring dims merged where every operand allows (BroadcastPlan::coalesce). The
/// CPU loops and the CUDA kernels index through it; `op` names the caller in errors.
BroadcastPlan broadcast_plan(const char* op, const Shape& out, const std::vector<const Shape*>& operands);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
/// GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). A primitive as in eager
/// frameworks: one kernel forward, one backward (g · gelu'(x), from the saved x).
Tensor gelu(const Tensor& x);
/// x * scale + shift in one kernel (the scalar forms of add, sub, mul and div use it).
Tensor affine(const Tensor& x, double scale, double shift);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

/// x broadcast to `shape` (a copy); the gradient sums back.
Tensor expand(const Tensor& x, const Shape& shape);

/// Comparisons return u8 (1 true, 0 false), broadcast like binary ops, and have no gradient.
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

/// cond (u8) ? a : b, broadcasting all three; differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

/// Converts to dtype; differentiable between floating dtypes (the gradient is cast back).
Tensor cast(const Tensor& x, DType dtype);

/// A one-element tensor on x's device and dtype, for comparing or combining with a scalar.
Tensor scalar_like(const Tensor& x, double value);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);

/// The broadcast shape of a and b, or an ft::Error naming op and both shapes.
Shape broadcast_shape(const char* op, const Shape& a, const Shape& b);

}  // namespace ft
