#include "layers/norm.h"

#include "lib/error.h"
#include "lib/ops/layer_norm.h"
#include "lib/ops/random.h"

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

Tensor LayerNormActDropout::forward(const Tensor& x) {
  const double p = is_training() ? p_ : 0.0;
  const Tensor offset = p > 0.0 ? PhiloxCounter::on(x.device()).take(static_cast<uint64_t>(x.numel())) : Tensor();
  return layer_norm_act_dropout(x, weight_, bias_, act_, p, seed_, offset, eps_);
}

}  // namespace ft
