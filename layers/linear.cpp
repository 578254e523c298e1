#include "layers/linear.h"

#include <cmath>

#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"

namespace ft {

Linear::Linear(Options options, Generator& gen) : options_(options) {
  FT_CHECK(options.in > 0 && options.out > 0, "Linear: in and out must be positive, got ", options.in, " and ",
           options.out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(options.in));
  auto init = [&](const Shape& shape) {
    if (options.init) return affine(Tensor::rand(shape, gen), 2.0 * bound, -bound);
    gen.advance(static_cast<uint64_t>(shape_numel(shape)));  // what Tensor::rand reserves
    return Tensor::empty(shape);
  };
  weight_ = register_parameter("weight", init({options.out, options.in}));
  if (options.bias) bias_ = register_parameter("bias", init({options.out}));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight_, bias_, options_.activation); }

}  // namespace ft
