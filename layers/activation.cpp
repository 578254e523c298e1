#include "layers/activation.h"

#include "lib/error.h"
#include "lib/ops/dropout.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/gelu.h"
#include "lib/ops/random.h"

namespace ft {

Tensor GELU::forward(const Tensor& x) { return gelu(x); }
Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Dropout::Dropout(double p, uint64_t seed) : p_(p), seed_(seed) {
  FT_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0.0) return x;
  return dropout(x, p_, seed_, PhiloxCounter::on(x.device()).take(static_cast<uint64_t>(x.numel())));
}

}  // namespace ft
