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

/// token_embedding's fused path: the same conditions.
Tensor token_embedding_fused(const Tensor& ids, const Tensor& tokens);

/// `positions` may be undefined: the token rows alone (token_embedding).
void token_position_forward(const Tensor& ids, const Tensor& tokens, const Tensor& positions, const Tensor& out);
/// tokens_grad [V, C] from the gradient rows of `ids` (any shape), deterministically (sorted runs):
/// fully written, or as an f32 GradBuffer view added into only where an id reaches.
void token_rows_backward(const Tensor& grad, const Tensor& ids, const GradOutput& tokens_grad);
/// tokens_grad [V, C] and positions_grad [P, C]: fully written (rows no id or position reaches
/// get zeros), or, as f32 GradBuffer views, added into (or written, when they hold zeros) only
/// where an id or a position reaches.
void token_position_backward(const Tensor& grad, const Tensor& ids, const GradOutput& tokens_grad,
                             const GradOutput& positions_grad);

}  // namespace ft::cuda
