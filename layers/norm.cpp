#include "layers/norm.h"

#include "layers/linear.h"
#include "lib/error.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/linear_norm/linear_norm.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/random/random.h"

namespace ft {

LayerNorm::LayerNorm(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", Tensor::full({dim}, 1.0));
  bias_ = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight_, bias_, eps_); }

LayerNormActDropout::LayerNormActDropout(int64_t dim, Activation act, double dropout_p, uint64_t seed, double eps)
    : act_(act), p_(dropout_p), eps_(eps), seed_(seed) {
  FT_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "LayerNormActDropout: dropout p must be in [0, 1), got ", dropout_p);
  weight_ = register_parameter("weight", Tensor::full({dim}, 1.0));
  bias_ = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNormActDropout::take_offset(const Tensor& x, int64_t elements, double p) const {
  return p > 0.0 ? PhiloxCounter::on(x.device()).take(static_cast<uint64_t>(elements)) : Tensor();
}

Tensor LayerNormActDropout::forward(const Tensor& x) {
  const double p = active_p();
  return layer_norm_act_dropout(x, weight_, bias_, act_, p, seed_, take_offset(x, x.numel(), p), eps_);
}

Tensor LayerNormActDropout::forward_after(const Linear& linear, const Tensor& x) {
  FT_CHECK(linear.activation() == Activation::None, "LayerNormActDropout::forward_after: the linear layer must have "
           "no activation of its own, got ", activation_name(linear.activation()));
  check_linear_inputs(x, linear.weight(), linear.bias());
  const double p = active_p();
  // As many draws as the norm's input has elements: the two forwards' offsets, to the element.
  const int64_t elements = x.numel() / x.size(-1) * linear.weight().size(0);
  return linear_layer_norm_act_dropout(x, linear.weight(), linear.bias(), weight_, bias_, act_, p, seed_,
                                       take_offset(x, elements, p), eps_);
}

}  // namespace ft
