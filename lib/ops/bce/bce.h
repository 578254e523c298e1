// Binary cross-entropy on logits, the mean over N: loss = mean(max(x, 0) − x·y + log(1 + e^−|x|)),
// the stable form of −y·log σ(x) − (1 − y)·log(1 − σ(x)). logits [N] or [N, 1] (f32, bf16,
// f64), targets of any floating dtype with N elements (labels in [0, 1]); the loss is a []
// tensor in f32 (f64 for f64 logits). d loss / d x = (σ(x) − y) / N.
//
// Fused (CUDA, f32/bf16 logits, f32 targets): one kernel, one block, computes the loss (a sum in
// a fixed order, so it is reproducible) and, when a gradient is needed, writes the gradient
// into dlogits in the same pass; backward only scales it by the upstream gradient in place
// (nothing when that is 1), so the fused node runs backward once (retain_graph is an
// ft::Error). Twin: relu, neg, mul, sub, exp, log, sum primitives.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets);
Tensor binary_cross_entropy_with_logits_composite(const Tensor& logits, const Tensor& targets);
}  // namespace ft
