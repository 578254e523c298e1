#include "lib/ops/norm/norm_dispatch.h"

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/norm/norm_cuda.h"

namespace ft {

void check_norm_inputs(const char* op, const Tensor& x, const Tensor& residual, const Tensor& weight,
                       const Tensor& bias, bool has_bias) {
  check_defined(x, op, "x");
  check_defined(weight, op, "weight");
  if (has_bias) check_defined(bias, op, "bias");
  FT_CHECK(x.dim() >= 1, op, ": x needs at least one dim");
  const int64_t c = x.size(-1);
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    FT_CHECK(p->shape() == Shape{c} && p->dtype() == x.dtype() && p->device() == x.device(), op, ": x ",
             shape_str(x.shape()), " ", dtype_name(x.dtype()), " on ", x.device().str(), " needs weight and bias [",
             c, "] alike, got ", shape_str(p->shape()), " ", dtype_name(p->dtype()), " on ", p->device().str());
  }
  if (residual.defined())
    FT_CHECK(residual.shape() == x.shape() && residual.dtype() == x.dtype() && residual.device() == x.device(), op,
             ": residual ", shape_str(residual.shape()), " ", dtype_name(residual.dtype()), " must match x ",
             shape_str(x.shape()), " ", dtype_name(x.dtype()));
}

void check_norm_epilogue_inputs(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                double dropout_p, const Tensor& offset) {
  check_norm_inputs(op, x, Tensor(), weight, bias, true);
  FT_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ", dropout_p);
  if (dropout_p > 0.0) check_philox_offset(op, x, offset);
}

bool norm_fused_ok(const Tensor& x) {
  if constexpr (kCudaBuild)
    return use_fused(x) && (x.dtype() == DType::F32 || x.dtype() == DType::BF16) && x.numel() > 0 &&
           cuda::norm_supported(x.size(-1));
  return false;
}

}  // namespace ft
