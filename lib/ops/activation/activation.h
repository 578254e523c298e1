// Pointwise activations: the composite twins (primitive ops) shared by every op that applies
// one (linear, bias_act). The fused kernels use the formulas in lib/cuda/math.cuh.
#pragma once
#include "lib/elementwise_math.h"  // Activation
#include "lib/tensor.h"

namespace ft {

const char* activation_name(Activation act);
/// act(x) built from primitives (autograd differentiates it).
Tensor activate(const Tensor& x, Activation act);

}  // namespace ft
