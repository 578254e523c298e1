#include "lib/ops/dropout.h"

#include "lib/error.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/random.h"

namespace ft {

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  check_defined(x, "dropout", "x");
  FT_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  if (p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Tensor uniform = philox_uniform(x.shape(), seed, offset, x.device());
  Tensor keep = cast(ge(uniform, scalar_like(uniform, p)), x.dtype());
  return x * keep * (1.0 / (1.0 - p));
}

}  // namespace ft
