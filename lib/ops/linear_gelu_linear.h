// linear_gelu_linear(x, W1, b1, W2, b2) = linear(gelu(linear(x, W1, b1)), W2, b2): a
// transformer's MLP, fused across its two products as Apex's FusedDenseGeluDense is.
//
// x: [..., IN], W1: [HIDDEN, IN], b1: [HIDDEN], W2: [OUT, HIDDEN], b2: [OUT]; result [..., OUT].
// Fused (CUDA, bf16/f32, both biases, HIDDEN and OUT multiples of 8): forward is the two
// epilogue products of `linear` (the first writes gelu(pre) and pre). Backward: the second
// product's input gradient dy·W2 goes through the GELU's derivative and the first bias's
// gradient in its own DGELU_BGRAD epilogue, so the gradient of gelu(pre) is never stored and no
// elementwise pass reads it back (on gpt2-124M that pass was 141 us of HBM traffic per layer on
// the H100); then dW2 (with db2), dx and dW1 are plain products. Saves x, pre and gelu(pre), as
// the two linears do.
// Twin: the two `linear` ops.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2);

}  // namespace ft
