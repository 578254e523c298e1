// The CUDA side of linear_cross_entropy: its fused path (linear_cross_entropy_fused.cpp), built on
// the matmul and cross-entropy launchers. Compiled only in a CUDA build; callers reach it
// under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/linear_cross_entropy/linear_cross_entropy.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// The fused path: f32/bf16 x [N, C] and weight [V, C] on CUDA, N·C > 0; chunks of chunk_rows rows.
Tensor linear_cross_entropy_fused(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                  const CrossEntropyOptions& options, int64_t chunk_rows);

}  // namespace ft::cuda
