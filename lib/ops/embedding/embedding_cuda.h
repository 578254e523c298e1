// The CUDA side of token_position_embedding: the fused path (embedding_fused.cpp) and the kernels'
// launchers (embedding.cu). Compiled only in a CUDA build; callers reach it
// under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/autograd.h"
#include "lib/ops/embedding/embedding.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// token_position_embedding's fused path: f32/bf16 tables on CUDA, ids not empty.
Tensor token_position_embedding_fused(const Tensor& ids, const Tensor& tokens, const Tensor& positions);

void token_position_forward(const Tensor& ids, const Tensor& tokens, const Tensor& positions, const Tensor& out);
/// tokens_grad [V, C] and positions_grad [P, C]: fully written (rows no id or position reaches
/// get zeros), or, as f32 GradBuffer views, added into (or written, when they hold zeros) only
/// where an id or a position reaches.
void token_position_backward(const Tensor& grad, const Tensor& ids, const GradOutput& tokens_grad,
                             const GradOutput& positions_grad);

}  // namespace ft::cuda
