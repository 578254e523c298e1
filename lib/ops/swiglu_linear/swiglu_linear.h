// swiglu_linear(a, b, W) = swiglu(a, b) · Wᵀ: a SwiGLU MLP's down projection (Llama's down_proj
// over silu(gate)·up), without keeping the activation for backward.
//
// a, b: [..., H] of one shape, dtype and device; W: [OUT, H]; result [..., OUT], no bias.
// Fused (CUDA, f32/bf16): forward runs swiglu's kernel into a buffer freed once the product has
// read it; backward runs that kernel again (one pass over a and b), then dW = dyᵀ·h straight
// into W's gradient view, dh = dy·W, and swiglu's backward kernel for da and db. Saves a, b and
// W: the twin (and swiglu then linear) also keeps h and silu(a), two [..., H] tensors, which in a
// Llama-3.2-1B step at B 4, T 2048 is 128 MB a layer for h alone; the price is one more pass of
// swiglu's forward in backward. The product of its forward is a 2-D weight's, so selective
// recomputation (lib/ops/recompute/recompute.h) keeps it like a linear layer's (and its replay
// makes no h).
// Twin: swiglu_composite(a, b) then the matmul primitive.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor swiglu_linear(const Tensor& a, const Tensor& b, const Tensor& weight);
Tensor swiglu_linear_composite(const Tensor& a, const Tensor& b, const Tensor& weight);
/// Throws ft::Error naming what is wrong unless a and b are [..., H] alike and weight [OUT, H]
/// of their dtype and device.
void check_swiglu_linear_inputs(const Tensor& a, const Tensor& b, const Tensor& weight);

}  // namespace ft
