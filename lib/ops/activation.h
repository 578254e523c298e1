// Pointwise activations: the composite twins (primitive ops) shared by every op that applies
// one (linear, bias_act). The fused kernels use the formulas in lib/cuda/math.cuh.
#pragma once
#include "lib/tensor.h"

namespace ft {

enum class Activation : uint8_t {
  None,
  ReLU,
  GELU,     // tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  GELUErf,  // exact form: 0.5·x·(1 + erf(x/√2))
  SiLU,     // x·sigmoid(x)
};

const char* activation_name(Activation act);
/// act(x) built from primitives (autograd differentiates it).
Tensor activate(const Tensor& x, Activation act);

}  // namespace ft
