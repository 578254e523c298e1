// The CUDA side of linear_layer_norm_act_dropout and linear_add_layer_norm: their fused paths
// (linear_norm_fused.cpp), built on linear's epilogue product and the norm's kernels. Compiled only
// in a CUDA build; callers reach it under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/linear_norm/linear_norm.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// linear_layer_norm_act_dropout's fused path: the linear on its cuBLASLt epilogue path, and the norm
/// with its epilogue, whose backward also sums the linear's bias gradient.
Tensor linear_layer_norm_act_dropout_fused(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                           const Tensor& norm_weight, const Tensor& norm_bias, Activation act,
                                           double dropout_p, uint64_t seed, const Tensor& offset, double eps);
/// linear_add_layer_norm's fused path: two nodes, the linear with the residual add, and the norm,
/// whose backward hands the linear its bias gradient.
AddNormResult linear_add_layer_norm_fused(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          const Tensor& residual, const Tensor& norm_weight, const Tensor& norm_bias,
                                          double eps);

}  // namespace ft::cuda
