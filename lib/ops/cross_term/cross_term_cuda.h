// The CUDA side of cross_term: its fused path (cross_term_fused.cpp) and the kernels' launchers
// (cross_term.cu). Compiled only in a CUDA build; callers reach it under `if constexpr (kCudaBuild)`.
#pragma once
#include "lib/autograd.h"
#include "lib/ops/cross_term/cross_term.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// The fused path: f32/bf16 tensors on CUDA, as cross_term checks them.
Tensor cross_term_fused(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x);

/// out = x0 ⊙ (y + bias) + x, [rows, cols].
void cross_term_forward(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x, const Tensor& out);
/// dx0 = g ⊙ (y + bias), dy = g ⊙ x0, and the column sums of dy into dbias.
void cross_term_backward(const Tensor& g, const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& dx0,
                         const Tensor& dy, const GradOutput& dbias);

}  // namespace ft::cuda
