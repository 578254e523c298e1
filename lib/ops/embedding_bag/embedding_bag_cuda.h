// The CUDA side of embedding_bag: its fused path (embedding_bag_fused.cpp), whose backward is the
// sparse update, and the kernels' launchers (embedding_bag.cu). Compiled only in a CUDA build;
// callers reach it under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/embedding_bag/embedding_bag.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// The fused path: f32 tables the kernels take, out_dtype f32 or bf16, ids not empty; with a weight
/// gradient wanted, options.update is set and backward applies it to the rows reached.
Tensor embedding_bag_fused(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                           const Tensor& per_sample_weights, const EmbeddingBagOptions& options);

/// Whether the fused kernels take a width of D columns.
bool embedding_bag_supported(int64_t d);
/// out [S, D] (f32 or bf16) = the pooled rows; weight f32.
void embedding_bag_forward(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                           const Tensor& per_sample_weights, BagMode mode, const Tensor& out);
/// Applies `update` to the rows reached, from grad [S, D] (f32 or bf16); writes
/// per_sample_weights_grad [N] (f32) when it is defined.
void embedding_bag_backward_update(const Tensor& grad, const Tensor& weight, const Tensor& row_offsets,
                                   const Tensor& ids, const Tensor& offsets, const Tensor& per_sample_weights,
                                   BagMode mode, const SparseRowUpdate& update, const Tensor& per_sample_weights_grad);

}  // namespace ft::cuda
