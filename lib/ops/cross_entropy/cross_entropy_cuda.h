// The CUDA side of cross_entropy: its fused path (cross_entropy_fused.cpp) and the loss kernels'
// launchers (cross_entropy.cu), which linear_cross_entropy and bce use too. Compiled only in a
// CUDA build; callers reach it under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/cross_entropy/cross_entropy.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// cross_entropy's fused path: f32/bf16 logits [N, V] on CUDA, N·V > 0. One kernel writes the loss
/// and the final dlogits; backward scales them by the upstream gradient in place.
Tensor cross_entropy_fused(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options);

/// Validates the targets (flagging out-of-range ids) and writes the number of counted rows to
/// `count` (f32 [1]).
void cross_entropy_count(const Tensor& targets, int64_t vocab, int64_t ignore_index, const Tensor& count);
/// loss (f32 [1]) = the reduced loss over these rows, accumulated (+=) when `accumulate`;
/// dlogits (when defined, same shape and dtype as logits, may alias logits) = d loss / d logits.
/// `count` is the number of counted rows of the whole batch (for Mean); undefined when these rows
/// are the batch: then the targets are validated and counted here (inside the loss kernel when
/// the vocabulary is tiny, so the MLP's classifier loss is one launch).
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options,
                           const Tensor& count, const Tensor& loss, bool accumulate, const Tensor& dlogits);
/// grad *= *upstream (a [] or [1] f32 tensor on the device); returns at once when it is 1.
void scale_by_upstream(const Tensor& grad, const Tensor& upstream);

}  // namespace ft::cuda
