#include "lib/ops/norm/layer_norm.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/norm/norm_cuda.h"
#include "lib/ops/norm/norm_dispatch.h"
#include "lib/ops/reduce/reduce.h"

namespace ft {

Tensor layer_norm_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  // Low-precision inputs are normalized in f32, as eager frameworks do.
  const DType compute = x.dtype() == DType::BF16 ? DType::F32 : x.dtype();
  Tensor xf = cast(x, compute);
  Tensor centered = xf - mean(xf, true);
  Tensor var = mean(centered * centered, true);
  Tensor normalized = centered * rsqrt(var + eps);
  Tensor y = normalized * cast(weight, compute) + cast(bias, compute);
  return cast(y, x.dtype());
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_norm_inputs("layer_norm", x, Tensor(), weight, bias, true);
  if constexpr (kCudaBuild)
    if (norm_fused_ok(x)) return cuda::norm_fused(NormKind::Layer, x, Tensor(), weight, bias, eps).out;
  return layer_norm_composite(x, weight, bias, eps);
}

Tensor layer_norm_act_dropout_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act,
                                        double dropout_p, uint64_t seed, const Tensor& offset, double eps) {
  const Tensor y = activate(layer_norm_composite(x, weight, bias, eps), act);
  return dropout_p > 0.0 ? dropout_composite(y, dropout_p, seed, offset) : y;
}

Tensor layer_norm_act_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act,
                              double dropout_p, uint64_t seed, const Tensor& offset, double eps) {
  check_norm_epilogue_inputs("layer_norm_act_dropout", x, weight, bias, dropout_p, offset);
  if constexpr (kCudaBuild)
    if (norm_fused_ok(x))
      return cuda::norm_fused(NormKind::Layer, x, Tensor(), weight, bias, eps,
                              NormEpilogue{.act = act, .dropout_p = dropout_p, .seed = seed, .offset = offset,
                                           .mask = Tensor()})
          .out;
  return layer_norm_act_dropout_composite(x, weight, bias, act, dropout_p, seed, offset, eps);
}

AddNormResult add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                             double eps) {
  check_norm_inputs("add_layer_norm", x, residual, weight, bias, true);
  if constexpr (kCudaBuild)
    if (norm_fused_ok(x)) return cuda::norm_fused(NormKind::Layer, x, residual, weight, bias, eps);
  Tensor sum = x + residual;
  return {sum, layer_norm_composite(sum, weight, bias, eps)};
}

}  // namespace ft
