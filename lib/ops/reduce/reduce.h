// Reductions over the last axis, and sum_to (the gradient of broadcasting).
#pragma once
#include "lib/tensor.h"

namespace ft {

enum class ReduceOp : uint8_t { Sum, Mean, Max };

/// Reduces the last axis: [..., C] -> [...] or, with keepdim, [..., 1]. Accumulates in f32
/// (f64 for f64 inputs). Max's gradient goes to every element equal to the maximum.
Tensor sum(const Tensor& x, bool keepdim = false);
Tensor mean(const Tensor& x, bool keepdim = false);
Tensor max(const Tensor& x, bool keepdim = false);
Tensor reduce_last(ReduceOp op, const Tensor& x, bool keepdim);

/// Sums x down to `shape`, which x's shape broadcasts from (numpy rules).
Tensor sum_to(const Tensor& x, const Shape& shape);

/// Sum of every element, as a one-element tensor of shape [].
Tensor sum_all(const Tensor& x);

}  // namespace ft
