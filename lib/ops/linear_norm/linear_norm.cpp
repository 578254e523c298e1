#include "lib/ops/linear_norm/linear_norm.h"

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/linear_norm/linear_norm_cuda.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/norm/norm_cuda.h"

namespace ft {

Tensor linear_layer_norm_act_dropout_composite(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                               const Tensor& norm_weight, const Tensor& norm_bias, Activation act,
                                               double dropout_p, uint64_t seed, const Tensor& offset, double eps) {
  return layer_norm_act_dropout_composite(linear_composite(x, weight, bias, Activation::None), norm_weight, norm_bias,
                                          act, dropout_p, seed, offset, eps);
}

Tensor linear_layer_norm_act_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& norm_weight, const Tensor& norm_bias, Activation act,
                                     double dropout_p, uint64_t seed, const Tensor& offset, double eps) {
  check_linear_inputs(x, weight, bias);
  // The norm's backward sums dx's columns only in its epilogue form (an activation or dropout):
  // without one, the plain norm saves its output instead of its input.
  const bool epilogue = act != Activation::None || dropout_p > 0.0;
  if constexpr (kCudaBuild)
    if (epilogue && linear_takes_epilogue_path(x, weight, bias, Activation::None) &&
        cuda::norm_supported(weight.size(0)))
      return cuda::linear_layer_norm_act_dropout_fused(x, weight, bias, norm_weight, norm_bias, act, dropout_p, seed,
                                                       offset, eps);
  // Each op on its own: the twins, or each fused where it can be.
  return layer_norm_act_dropout(linear(x, weight, bias), norm_weight, norm_bias, act, dropout_p, seed, offset, eps);
}

AddNormResult linear_add_layer_norm_composite(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                              const Tensor& residual, const Tensor& norm_weight,
                                              const Tensor& norm_bias, double eps) {
  const Tensor sum = linear_composite(x, weight, bias, Activation::None) + residual;
  return {sum, layer_norm_composite(sum, norm_weight, norm_bias, eps)};
}

AddNormResult linear_add_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                    const Tensor& norm_weight, const Tensor& norm_bias, double eps) {
  check_linear_inputs(x, weight, bias);
  if constexpr (kCudaBuild)
    if (linear_takes_epilogue_path(x, weight, bias, Activation::None) && cuda::norm_supported(weight.size(0)))
      return cuda::linear_add_layer_norm_fused(x, weight, bias, residual, norm_weight, norm_bias, eps);
  return add_layer_norm(linear(x, weight, bias), residual, norm_weight, norm_bias, eps);
}

}  // namespace ft
