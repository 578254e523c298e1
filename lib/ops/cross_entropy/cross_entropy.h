// Softmax cross-entropy: logits [N, V], integer targets [N] (i32/i64).
//
// loss_i = lse_i − (1 − ε)·logits_i[target_i] − ε·mean_j(logits_i[j]), with ε the label
// smoothing (0 by default) and lse the log-sum-exp of the row. Rows whose target equals
// ignore_index count for nothing. Mean divides by the number of counted rows (NaN when there
// are none). A target outside [0, V) that is not ignore_index is an ft::Error (on CUDA, raised
// at the next synchronizing read). Computed in f32 for bf16 logits; the loss is a [] tensor
// in f32 (f64 for f64 logits).
//
// Fused (CUDA, f32/bf16): forward is one kernel, a block per row with an online max and sum.
// When a gradient is needed it also writes dlogits = softmax − target distribution, scaled for
// the reduction, in the same pass (the row is still in L2), as llm.c does; backward is one
// kernel that multiplies by the upstream gradient in place, and returns at once when that
// gradient is 1. Because of that in-place scaling, the fused node runs backward once:
// retain_graph and a second backward through it is an ft::Error. Fewest bytes for forward + backward: read logits once, write dlogits once.
// Twin: log_softmax (f32 for bf16 logits), gather_last of the targets' log-probabilities, and
// compare/where/mul/sum primitives for ignore_index, label smoothing and the reduction.
#pragma once
#include "lib/tensor.h"

namespace ft {

enum class Reduction : uint8_t { Mean, Sum };

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
};

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {});
Tensor cross_entropy_composite(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {});

/// Checks shapes, dtypes and devices, and queues the range check of the targets.
void check_cross_entropy_inputs(const char* op, const Tensor& logits_or_x, int64_t vocab, const Tensor& targets,
                                int64_t ignore_index);
}  // namespace ft
