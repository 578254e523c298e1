// Evaluation helpers for Trainer::Options::eval callbacks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "layers/module.h"
#include "train/data/batch_source.h"
#include "train/loop/binary_metrics.h"

namespace ft {

/// Fraction of rows whose arg-max logit equals the label, evaluated in batches of `batch` rows
/// in eval mode without autograd; inputs ([N, ...]) and labels ([N]) are host tensors, the
/// inputs cast to `dtype` on `device`.
double evaluate_accuracy(Module& model, const Tensor& inputs, const Tensor& labels, int64_t batch, Device device,
                         DType dtype);

/// Log loss, accuracy and exact AUC of a click model over `batches` batches of `source` (an
/// evaluation source: unshuffled, keeping the last partial batch), from every prediction. Runs
/// in eval mode without autograd; `logits` maps a batch moved to `device` to its logits [B];
/// the batch's "labels" are the targets.
BinaryMetrics evaluate_binary(Module& model, BatchSource& source, int64_t batches, Device device,
                              const std::function<Tensor(const Batch&)>& logits);

}  // namespace ft
