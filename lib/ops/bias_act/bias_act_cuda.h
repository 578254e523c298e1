// The CUDA side of bias_act and swiglu: the fused paths (bias_act_fused.cpp) and the launchers
// (bias_act.cu). Compiled only in a CUDA build; bias_act.cpp calls it under
// `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/autograd.h"
#include "lib/ops/bias_act/bias_act.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// bias_act's fused path: x f32/bf16 on CUDA, numel > 0.
Tensor bias_act_fused(const Tensor& x, const Tensor& bias, Activation act);
/// swiglu's fused path, for both forms: a and b are (possibly the same) tensors, b starting
/// b_offset elements in; `split`: a = b = ab, whose gradient is one tensor.
Tensor swiglu_fused(const Tensor& a, const Tensor& b, int64_t b_offset, int64_t width, int64_t in_stride,
                    const Shape& out_shape, bool split);

/// y = act(x + bias) over rows of C; bias may be undefined.
void bias_act_forward(const Tensor& x, const Tensor& bias, Activation act, const Tensor& y);
/// dx = dy·act'(x + bias); dbias (when defined) = column sums of dx (or += into an f32 view).
void bias_act_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Activation act, const Tensor& dx,
                       const GradOutput& dbias);
/// y[r, j] = silu(a[r·in_stride + j])·b[b_offset + r·in_stride + j] for j < width. Separate
/// inputs: in_stride = width, b_offset = 0. Split form: a = b = ab [rows, 2H], in_stride = 2H,
/// b_offset = H (da and db likewise in backward).
void swiglu_forward(const Tensor& a, const Tensor& b, int64_t b_offset, int64_t rows, int64_t width,
                    int64_t in_stride, const Tensor& y);
void swiglu_backward(const Tensor& dy, const Tensor& a, const Tensor& b, int64_t b_offset, int64_t rows,
                     int64_t width, int64_t in_stride, const Tensor& da, const Tensor& db);

}  // namespace ft::cuda
