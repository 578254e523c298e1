#include "lib/ops/gelu.h"

#include <cmath>

#include "lib/ops/elementwise.h"

namespace ft {

Tensor gelu(const Tensor& x) {
  const double k = std::sqrt(2.0 / M_PI);
  Tensor inner = affine(x + pow(x, 3.0) * 0.044715, k, 0.0);
  return x * affine(tanh(inner), 0.5, 0.5);
}

}  // namespace ft
