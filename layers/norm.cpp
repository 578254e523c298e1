#include "layers/norm.h"

#include "lib/ops/layer_norm.h"

namespace ft {

LayerNorm::LayerNorm(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", Tensor::full({dim}, 1.0));
  bias_ = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight_, bias_, eps_); }

}  // namespace ft
