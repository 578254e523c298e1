// token_position_embedding(ids, tokens, positions): out[b, t] = tokens[ids[b, t]] + positions[t],
// the input of a GPT. ids [B, T] (i32 or i64); tokens [V, C] and positions [P, C] (P >= T), one
// floating dtype and device; out [B, T, C].
//
// Fused (CUDA, f32 or bf16): one kernel reads both rows and writes the sum once. Its backward
// is deterministic: the ids are sorted (stable radix sort) and each run of equal ids adds its
// gradient rows in f32 in position order, one row of the tokens' gradient per run; the
// positions' gradient is the sum over the batch. Twin: gather_rows twice and add (its tokens'
// gradient is an atomic scatter-add, in the gradient's dtype).
// An id outside [0, V) is an ft::Error (on CUDA, raised at the next synchronizing read).
//
// token_embedding(ids, tokens): out[..., :] = tokens[ids[...]], a lookup with no positions
// (Llama's embed_tokens). ids of any shape (i32 or i64), tokens [V, C]; out [..., C]. Fused: the
// same kernels without the position rows, so its backward is deterministic too. Twin: gather_rows
// (an atomic scatter-add: its bits depend on timing when ids repeat).
#pragma once
#include "lib/autograd.h"
#include "lib/tensor.h"

namespace ft {

Tensor token_position_embedding(const Tensor& ids, const Tensor& tokens, const Tensor& positions);
Tensor token_position_embedding_composite(const Tensor& ids, const Tensor& tokens, const Tensor& positions);
Tensor token_embedding(const Tensor& ids, const Tensor& tokens);
Tensor token_embedding_composite(const Tensor& ids, const Tensor& tokens);

}  // namespace ft
