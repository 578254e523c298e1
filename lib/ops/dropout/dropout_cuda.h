// The CUDA side of dropout and bias_dropout_add: the fused path (dropout_fused.cpp) and the kernels'
// launchers (dropout.cu). Compiled only in a CUDA build; callers reach it
// under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/dropout/dropout.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// bias_dropout_add's fused path: f32/bf16 x on CUDA, 0 < p < 1. Backward regenerates the mask from
/// (seed, offset); nothing else is saved.
Tensor bias_dropout_add_fused(const Tensor& x, const Tensor& bias, const Tensor& residual, double p, uint64_t seed,
                              const Tensor& offset);

/// out = (residual +) keep·scale·(x (+ bias)); bias and residual may be undefined.
void dropout_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, double p, uint64_t seed,
                     const Tensor& offset, const Tensor& out);
/// dx = keep·scale·dy; dbias (when defined) = column sums of dx.
void dropout_backward(const Tensor& dy, double p, uint64_t seed, const Tensor& offset, const Tensor& dx,
                      const Tensor& dbias);

}  // namespace ft::cuda
