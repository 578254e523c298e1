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
#include "lib/autograd.h"
#include "lib/ops/activation/activation.h"
#include "lib/tensor.h"

namespace ft {

Tensor bias_act(const Tensor& x, const Tensor& bias, Activation act);
Tensor bias_act_composite(const Tensor& x, const Tensor& bias, Activation act);

Tensor swiglu(const Tensor& a, const Tensor& b);
Tensor swiglu(const Tensor& ab);
Tensor swiglu_composite(const Tensor& a, const Tensor& b);
}  // namespace ft
