// The CUDA side of binary_cross_entropy_with_logits: its fused path (bce_fused.cpp) and the loss
// kernel's launcher (bce.cu). Compiled only in a CUDA build; callers reach it
// under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/bce/bce.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// The fused path: f32/bf16 logits [N] or [N, 1], f32 targets, on CUDA.
Tensor bce_with_logits_fused(const Tensor& logits, const Tensor& targets);

/// loss (f32 [1]) = the mean loss; dlogits (when defined, logits' shape and dtype) = its gradient.
void bce_with_logits_forward(const Tensor& logits, const Tensor& targets, const Tensor& loss, const Tensor& dlogits);

}  // namespace ft::cuda
