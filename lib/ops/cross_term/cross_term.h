// cross_term: the end of a DCNv2 cross layer (Wang et al. 2021, the interaction of MLPerf's
// DLRMv2): x_next = x0 ⊙ (y + bias) + x, where y = U·(V·x) is the layer's low-rank product,
// computed before by two matmuls. x0 is the interaction's input (the bottom MLP's output and the
// pooled embeddings, joined), x the layer's input.
//
// Letters: B rows, W the width. x0, y and x [B, W] and bias [W], one floating dtype and device;
// out [B, W] in that dtype, computed in f32 (f64 for f64).
//
// Fused (CUDA, f32/bf16): one pass forward (reads x0, y, x and the bias once, writes out) and one
// backward, which writes d x0 = g ⊙ (y + bias) and d y = g ⊙ x0 and sums d y down the columns
// into d bias in the same pass (row_map.cuh's deterministic column sums); d x is g itself. It
// saves y, no sum of y and the bias. Twin: add, mul, add (and their backward: mul, mul, a
// column sum), with y + bias and x0 ⊙ (y + bias) as tensors of their own.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor cross_term(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x);
Tensor cross_term_composite(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x);

}  // namespace ft
