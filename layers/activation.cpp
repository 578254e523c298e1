#include "layers/activation.h"

#include "lib/error.h"
#include "lib/ops/bias_act/bias_act.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/random/random.h"

namespace ft {

// Through bias_act (with no bias), so fused mode on CUDA runs the fused kernel.
Tensor GELU::forward(const Tensor& x) { return bias_act(x, Tensor(), Activation::GELU); }
Tensor ReLU::forward(const Tensor& x) { return bias_act(x, Tensor(), Activation::ReLU); }

Dropout::Dropout(double p, uint64_t seed) : p_(p), seed_(seed) {
  FT_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0.0) return x;
  return dropout(x, p_, seed_, PhiloxCounter::on(x.device()).take(static_cast<uint64_t>(x.numel())));
}

}  // namespace ft
