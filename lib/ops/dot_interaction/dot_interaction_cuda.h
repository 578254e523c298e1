// The CUDA side of dot_interaction: its fused path (dot_interaction_fused.cpp) and the kernels'
// launchers (dot_interaction.cu). Compiled only in a CUDA build; callers reach it
// under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/dot_interaction/dot_interaction.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// The fused path: f32/bf16 dense [B, D] and sparse [B, T, D] on CUDA that the kernels take.
Tensor dot_interaction_fused(const Tensor& dense, const Tensor& sparse);

/// Whether the fused kernels take F vectors of D (shared memory).
bool dot_interaction_supported(int64_t features, int64_t d);
void dot_interaction_forward(const Tensor& dense, const Tensor& sparse, const Tensor& out);
void dot_interaction_backward(const Tensor& grad, const Tensor& dense, const Tensor& sparse, const Tensor& dense_grad,
                              const Tensor& sparse_grad);

}  // namespace ft::cuda
