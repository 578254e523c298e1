// Softmax and log-softmax over the last dim: primitives with one CUDA kernel a row each way, as
// eager frameworks have them. The attention twin and the cross-entropy twin are built on them.
//
// softmax(x, dtype):     y = exp(x − max) / Σ exp(x − max) along the last dim
// log_softmax(x, dtype): y = x − max − log Σ exp(x − max)
// computed in f32 (f64 for f64) and stored as `dtype`: x's own dtype, or f32 for bf16 x (the
// probabilities an eager framework keeps in f32 under autocast). A row whose elements are all
// −inf gives NaN, as exp(−inf − (−inf)) does.
//
// Backward has its own kernel, from the saved output y (nothing else is kept):
//   softmax:     dx = y · (dy − Σ dy·y)
//   log_softmax: dx = dy − exp(y) · Σ dy
// and dx takes x's dtype.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor softmax(const Tensor& x, DType dtype);
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x, DType dtype);
Tensor log_softmax(const Tensor& x);
}  // namespace ft
