// The CUDA launchers of softmax and log_softmax (softmax.cu). Compiled only in a CUDA build;
// callers reach it under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/softmax/softmax.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// y = softmax (log_softmax when `log`) of each row of x, rows of x.size(-1) elements.
void softmax_forward(const Tensor& x, const Tensor& y, bool log);
/// dx from the saved y and the incoming dy, as above.
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log);

}  // namespace ft::cuda
