#include "layers/linear.h"

#include <cmath>

#include "lib/error.h"
#include "lib/ops/elementwise.h"

namespace ft {

Linear::Linear(Options options, Generator& gen) : options_(options) {
  FT_CHECK(options.in > 0 && options.out > 0, "Linear: in and out must be positive, got ", options.in, " and ",
           options.out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(options.in));
  weight_ = register_parameter("weight", affine(Tensor::rand({options.out, options.in}, gen), 2.0 * bound, -bound));
  if (options.bias) bias_ = register_parameter("bias", affine(Tensor::rand({options.out}, gen), 2.0 * bound, -bound));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight_, bias_, options_.activation); }

}  // namespace ft
