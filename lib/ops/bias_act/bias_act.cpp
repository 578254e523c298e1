#include "lib/ops/bias_act/bias_act.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bias_act/bias_act_cuda.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"

namespace ft {

namespace {

bool fused_dtype(const Tensor& x) { return x.dtype() == DType::F32 || x.dtype() == DType::BF16; }

void check_bias(const char* op, const Tensor& x, const Tensor& bias) {
  check_defined(x, op, "x");
  FT_CHECK(x.dim() >= 1, op, ": x must have at least one dim");
  if (!bias.defined()) return;
  FT_CHECK(bias.shape() == Shape{x.size(-1)} && bias.dtype() == x.dtype() && bias.device() == x.device(), op,
           ": bias must be [", x.size(-1), "] ", dtype_name(x.dtype()), " on ", x.device().str(), ", got ",
           shape_str(bias.shape()), " ", dtype_name(bias.dtype()), " on ", bias.device().str());
}

}  // namespace

Tensor bias_act_composite(const Tensor& x, const Tensor& bias, Activation act) {
  return activate(bias.defined() ? x + bias : x, act);
}

Tensor bias_act(const Tensor& x, const Tensor& bias, Activation act) {
  check_bias("bias_act", x, bias);
  if constexpr (kCudaBuild)
    if (use_fused(x) && fused_dtype(x) && x.numel() > 0) return cuda::bias_act_fused(x, bias, act);
  return bias_act_composite(x, bias, act);
}

Tensor swiglu_composite(const Tensor& a, const Tensor& b) { return activate(a, Activation::SiLU) * b; }

Tensor swiglu(const Tensor& a, const Tensor& b) {
  check_defined(a, "swiglu", "a");
  check_defined(b, "swiglu", "b");
  FT_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device(), "swiglu: a ",
           shape_str(a.shape()), " ", dtype_name(a.dtype()), " and b ", shape_str(b.shape()), " ",
           dtype_name(b.dtype()), " must match");
  FT_CHECK(a.dim() >= 1, "swiglu: inputs need at least one dim");
  if constexpr (kCudaBuild) {
    if (use_fused(a) && fused_dtype(a) && a.numel() > 0) {
      const int64_t width = a.size(-1);
      return cuda::swiglu_fused(a, b, 0, width, width, a.shape(), false);
    }
  }
  return swiglu_composite(a, b);
}

Tensor swiglu(const Tensor& ab) {
  check_defined(ab, "swiglu", "ab");
  FT_CHECK(ab.dim() >= 1 && ab.size(-1) % 2 == 0, "swiglu: the split form needs an even last dim, got ",
           shape_str(ab.shape()));
  const int64_t h = ab.size(-1) / 2;
  if constexpr (kCudaBuild) {
    if (use_fused(ab) && fused_dtype(ab) && ab.numel() > 0) {
      Shape out = ab.shape();
      out.back() = h;
      return cuda::swiglu_fused(ab, ab, h, h, 2 * h, out, true);
    }
  }
  return swiglu_composite(narrow(ab, -1, 0, h), narrow(ab, -1, h, h));
}

}  // namespace ft
