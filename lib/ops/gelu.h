// GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as a composite of primitives.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor gelu(const Tensor& x);

}  // namespace ft
