// Bias plus activation, and SwiGLU: the pointwise tails of MLP blocks.
//
// bias_act(x, bias, act) = act(x + bias); x: [..., C], bias: [C] or undefined.
//   Fused (CUDA, f32/bf16): forward one kernel (x read once, y written once); backward one
//   kernel that writes dx = dy·act'(x + bias) and reduces db by columns in the same launch
//   (per-block partial sums, then the last block of each column tile adds them in a fixed
//   order: deterministic, no atomics on the values). Saves x (and bias) only.
// swiglu(a, b) = silu(a)·b, a and b of one shape; swiglu(ab) splits [..., 2H] into halves a, b.
//   Fused: one kernel each way; saves the inputs.
// Twins: add + the activation's primitives; silu, mul (and narrow for the split form).
#pragma once
#include "lib/ops/activation.h"
#include "lib/autograd.h"
#include "lib/tensor.h"

namespace ft {

Tensor bias_act(const Tensor& x, const Tensor& bias, Activation act);
Tensor bias_act_composite(const Tensor& x, const Tensor& bias, Activation act);

Tensor swiglu(const Tensor& a, const Tensor& b);
Tensor swiglu(const Tensor& ab);
Tensor swiglu_composite(const Tensor& a, const Tensor& b);

namespace cuda {
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
}  // namespace cuda

}  // namespace ft
