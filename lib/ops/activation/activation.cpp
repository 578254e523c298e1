#include "lib/ops/activation/activation.h"

#include <cmath>

#include "lib/ops/elementwise/elementwise.h"

namespace ft {

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::None: return "none";
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUErf: return "gelu_erf";
    case Activation::SiLU: return "silu";
  }
  return "?";
}

Tensor activate(const Tensor& x, Activation act) {
  switch (act) {
    case Activation::ReLU: return relu(x);
    case Activation::GELU: return gelu(x);
    case Activation::GELUErf: return x * affine(erf(x * M_SQRT1_2), 0.5, 0.5);
    case Activation::SiLU: return x * pow(exp(-x) + 1.0, -1.0);
    case Activation::None: return x;
  }
  return x;
}

}  // namespace ft
