// Softmax cross-entropy: logits [N, V], integer targets [N] (i32/i64).
// loss_i = logsumexp(logits_i) - logits_i[target_i]; rows whose target equals ignore_index
// contribute nothing. Mean divides by the number of counted rows (NaN when there are none).
// A target outside [0, V) that is not ignore_index is an ft::Error (on CUDA, raised at the
// next synchronizing read). Computed in f32 for bf16 logits; the result is a [] tensor in f32
// (f64 for f64 logits).
#pragma once
#include "lib/tensor.h"

namespace ft {

enum class Reduction : uint8_t { Mean, Sum };

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

}  // namespace ft
