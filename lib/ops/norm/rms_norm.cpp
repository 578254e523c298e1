#include "lib/ops/norm/rms_norm.h"

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/norm/norm_cuda.h"
#include "lib/ops/norm/norm_dispatch.h"
#include "lib/ops/reduce/reduce.h"

namespace ft {

Tensor rms_norm_composite(const Tensor& x, const Tensor& weight, double eps) {
  const DType compute = x.dtype() == DType::BF16 ? DType::F32 : x.dtype();
  Tensor xf = cast(x, compute);
  Tensor y = xf * rsqrt(mean(xf * xf, true) + eps) * cast(weight, compute);
  return cast(y, x.dtype());
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_norm_inputs("rms_norm", x, Tensor(), weight, Tensor(), false);
  if constexpr (kCudaBuild)
    if (norm_fused_ok(x)) return cuda::norm_fused(NormKind::RMS, x, Tensor(), weight, Tensor(), eps).out;
  return rms_norm_composite(x, weight, eps);
}

AddNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps) {
  check_norm_inputs("add_rms_norm", x, residual, weight, Tensor(), false);
  if constexpr (kCudaBuild)
    if (norm_fused_ok(x)) return cuda::norm_fused(NormKind::RMS, x, residual, weight, Tensor(), eps);
  Tensor sum = x + residual;
  return {sum, rms_norm_composite(sum, weight, eps)};
}

}  // namespace ft
