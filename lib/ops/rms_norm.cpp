#include "lib/ops/rms_norm.h"

#include "lib/error.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/norm_dispatch.h"
#include "lib/ops/reduce.h"

namespace ft {

Tensor rms_norm_composite(const Tensor& x, const Tensor& weight, double eps) {
  const DType compute = x.dtype() == DType::BF16 ? DType::F32 : x.dtype();
  Tensor xf = cast(x, compute);
  Tensor y = xf * rsqrt(mean(xf * xf, true) + eps) * cast(weight, compute);
  return cast(y, x.dtype());
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_norm_inputs("rms_norm", x, Tensor(), weight, Tensor(), false);
  if (!norm_fused_ok(x)) return rms_norm_composite(x, weight, eps);
  return norm_fused(NormKind::RMS, x, Tensor(), weight, Tensor(), eps).out;
}

AddNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps) {
  check_norm_inputs("add_rms_norm", x, residual, weight, Tensor(), false);
  if (!norm_fused_ok(x)) {
    Tensor sum = x + residual;
    return {sum, rms_norm_composite(sum, weight, eps)};
  }
  return norm_fused(NormKind::RMS, x, residual, weight, Tensor(), eps);
}

}  // namespace ft
