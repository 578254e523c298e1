#include "lib/ops/layer_norm.h"

#include "lib/error.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/reduce.h"

namespace ft {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_defined(x, "layer_norm", "x");
  check_defined(weight, "layer_norm", "weight");
  check_defined(bias, "layer_norm", "bias");
  const int64_t c = x.dim() ? x.size(-1) : 0;
  FT_CHECK(x.dim() >= 1 && weight.shape() == Shape{c} && bias.shape() == Shape{c}, "layer_norm: x ",
           shape_str(x.shape()), " needs weight and bias of shape [", c, "], got ", shape_str(weight.shape()), " and ",
           shape_str(bias.shape()));
  // Low-precision inputs are normalized in f32, as eager frameworks do.
  const DType compute = x.dtype() == DType::BF16 ? DType::F32 : x.dtype();
  Tensor xf = cast(x, compute);
  Tensor centered = xf - mean(xf, true);
  Tensor var = mean(centered * centered, true);
  Tensor normalized = centered * rsqrt(var + eps);
  Tensor y = normalized * cast(weight, compute) + cast(bias, compute);
  return cast(y, x.dtype());
}

}  // namespace ft
