// dot_interaction: DLRM's feature interaction. The bottom MLP's output and the pooled
// embeddings are F = T + 1 vectors of D per sample; every pair's dot product (the strictly
// lower triangle of their Gram matrix, row-major: (1,0), (2,0), (2,1), (3,0), ...) follows the
// dense vector itself. dense [B, D], sparse [B, T, D], one floating dtype and device; out
// [B, D + F(F−1)/2] in that dtype, computed in f32 (f64 for f64).
//
// Fused (CUDA, f32/bf16, F·(D+1) floats within 48 KB): forward and backward are one kernel each,
// a block per sample with its F vectors in shared memory: the forward writes the dense copy and
// the P dot products; the backward builds the symmetric pair-gradient matrix in shared memory
// and writes d dense = d out[:D] + Σ_j G[0][j]·x_j and d sparse_i = Σ_j G[i][j]·x_j. Neither the
// Gram matrix nor the concatenated [B, F, D] stack touches global memory.
// Twin: cat, matmul (batched X·Xᵀ), transpose, gather_rows of the lower triangle, cat.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor dot_interaction(const Tensor& dense, const Tensor& sparse);
Tensor dot_interaction_composite(const Tensor& dense, const Tensor& sparse);
}  // namespace ft
