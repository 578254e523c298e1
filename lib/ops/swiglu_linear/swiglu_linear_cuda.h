// The CUDA side of swiglu_linear (swiglu_linear_fused.cpp), compiled only in a CUDA build;
// swiglu_linear.cpp calls it under `if constexpr (kCudaBuild)`.
#pragma once
#include "lib/tensor.h"

namespace ft::cuda {

/// a, b f32/bf16 on CUDA, numel > 0, checked by swiglu_linear.
Tensor swiglu_linear_fused(const Tensor& a, const Tensor& b, const Tensor& weight);

}  // namespace ft::cuda
