#include "lib/ops/swiglu_linear/swiglu_linear.h"

#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bias_act/bias_act.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/swiglu_linear/swiglu_linear_cuda.h"

namespace ft {

void check_swiglu_linear_inputs(const Tensor& a, const Tensor& b, const Tensor& weight) {
  check_defined(a, "swiglu_linear", "a");
  check_defined(b, "swiglu_linear", "b");
  check_defined(weight, "swiglu_linear", "weight");
  FT_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device(), "swiglu_linear: a ",
           shape_str(a.shape()), " ", dtype_name(a.dtype()), " on ", a.device().str(), " and b ", shape_str(b.shape()),
           " ", dtype_name(b.dtype()), " on ", b.device().str(), " must match");
  FT_CHECK(weight.dim() == 2 && a.dim() >= 2 && a.size(-1) == weight.size(1), "swiglu_linear: weight must be [OUT, ",
           a.dim() >= 1 ? a.size(-1) : 0, "] for a ", shape_str(a.shape()), ", got ", shape_str(weight.shape()));
  FT_CHECK(weight.dtype() == a.dtype() && weight.device() == a.device(), "swiglu_linear: weight is ",
           dtype_name(weight.dtype()), " on ", weight.device().str(), ", a is ", dtype_name(a.dtype()), " on ",
           a.device().str());
}

Tensor swiglu_linear_composite(const Tensor& a, const Tensor& b, const Tensor& weight) {
  return matmul(swiglu_composite(a, b), weight, false, true);
}

Tensor swiglu_linear(const Tensor& a, const Tensor& b, const Tensor& weight) {
  check_swiglu_linear_inputs(a, b, weight);
  if constexpr (kCudaBuild) {
    const bool fused_dtype = a.dtype() == DType::BF16 || a.dtype() == DType::F32;
    if (use_fused(a) && fused_dtype && a.numel() > 0 && weight.size(0) > 0) return cuda::swiglu_linear_fused(a, b, weight);
  }
  return swiglu_linear_composite(a, b, weight);
}

}  // namespace ft
