// Evaluation helpers for Trainer::Options::eval callbacks.
#pragma once
#include <cstdint>

#include "layers/module.h"

namespace ft {

/// Fraction of rows whose arg-max logit equals the label, evaluated in batches of `batch` rows
/// in eval mode without autograd; inputs ([N, ...]) and labels ([N]) are host tensors, the
/// inputs cast to `dtype` on `device`.
double evaluate_accuracy(Module& model, const Tensor& inputs, const Tensor& labels, int64_t batch, Device device,
                         DType dtype);

}  // namespace ft
