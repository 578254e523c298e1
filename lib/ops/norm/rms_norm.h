// RMS normalization over the last dim C: x / √(mean(x²) + eps) · w, alone or after a residual
// add. Same fused kernels as layer_norm (lib/ops/norm/norm_forward.cu, norm_backward.cu) without the mean and the bias: the
// fused form also saves its output, not its input, and takes x̂ = out / w in backward, so a
// weight element of 0 gives NaN gradients and a device error (layer_norm.h's limitation).
// Twin: mul, mean, rsqrt primitives (f32 for bf16 inputs).
#pragma once
#include "lib/ops/norm/layer_norm.h"

namespace ft {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
Tensor rms_norm_composite(const Tensor& x, const Tensor& weight, double eps = 1e-6);
AddNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps = 1e-6);

}  // namespace ft
