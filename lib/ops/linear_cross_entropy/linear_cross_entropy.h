// linear_cross_entropy(x, W, targets) = cross_entropy(x·Wᵀ, targets): the language-model head
// and its loss without the full [N, V] logits.
//
// x: [N, C], W: [V, C], targets [N]. Fused (CUDA, f32/bf16): rows are processed in chunks; for
// each chunk the logits are computed, turned into dlogits in place by the fused cross-entropy
// kernel, and immediately consumed by the dx and dW products (dW accumulates across chunks).
// The gradients are therefore computed during forward, when a gradient is needed; backward
// only scales them by the upstream gradient, in place, so a second backward through the same
// forward (retain_graph) is an ft::Error. Peak extra memory: one chunk of logits
// (chunk_rows × V) plus dx and dW. Twin: matmul + cross_entropy (materializes [N, V]).
#pragma once
#include "lib/ops/cross_entropy/cross_entropy.h"

namespace ft {

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            CrossEntropyOptions options = {}, int64_t chunk_rows = 4096);
Tensor linear_cross_entropy_composite(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                      CrossEntropyOptions options = {});

}  // namespace ft
