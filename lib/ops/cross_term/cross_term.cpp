#include "lib/ops/cross_term/cross_term.h"

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/cross_term/cross_term_cuda.h"
#include "lib/ops/elementwise/elementwise.h"

namespace ft {

namespace {

void check_inputs(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x) {
  check_defined(x0, "cross_term", "x0");
  check_defined(y, "cross_term", "y");
  check_defined(bias, "cross_term", "bias");
  check_defined(x, "cross_term", "x");
  FT_CHECK(x0.dim() == 2 && y.shape() == x0.shape() && x.shape() == x0.shape() && bias.shape() == Shape{x0.size(1)},
           "cross_term: x0, y and x must be one [B, W] and bias [W], got ", shape_str(x0.shape()), ", ",
           shape_str(y.shape()), ", ", shape_str(x.shape()), " and ", shape_str(bias.shape()));
  for (const Tensor* t : {&y, &bias, &x})
    FT_CHECK(t->dtype() == x0.dtype() && t->device() == x0.device(),
             "cross_term: every input must be x0's dtype and device (", dtype_name(x0.dtype()), " on ",
             x0.device().str(), "), got ", dtype_name(t->dtype()), " on ", t->device().str());
  FT_CHECK(is_floating(x0.dtype()), "cross_term: a floating dtype is needed, got ", dtype_name(x0.dtype()));
}

}  // namespace

Tensor cross_term_composite(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x) {
  return x0 * (y + bias) + x;
}

Tensor cross_term(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x) {
  check_inputs(x0, y, bias, x);
  if constexpr (kCudaBuild)
    if (use_fused(x0) && (x0.dtype() == DType::F32 || x0.dtype() == DType::BF16) && x0.numel() > 0)
      return cuda::cross_term_fused(x0, y, bias, x);
  return cross_term_composite(x0, y, bias, x);
}

}  // namespace ft
