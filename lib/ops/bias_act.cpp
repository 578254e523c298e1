#include "lib/ops/bias_act.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/shape_ops.h"

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
  if (!use_fused(x) || !fused_dtype(x) || x.numel() == 0) return bias_act_composite(x, bias, act);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  cuda::bias_act_forward(x, bias, act, y);
  if (!needs_grad({&x, &bias})) return y;
  const bool want_bias = bias.defined() && bias.requires_grad();
  return record("bias_act", y, {x, bias}, [sx = x.detach(), sb = bias.defined() ? bias.detach() : Tensor(), act,
                                           want_bias](const Tensor& g) {
    Tensor dx = Tensor::empty(sx.shape(), sx.dtype(), sx.device());
    const GradOutput db = want_bias ? grad_output(1, true, sb.shape(), sb.dtype(), sb.device()) : GradOutput();
    cuda::bias_act_backward(g, sx, sb, act, dx, db);
    return std::vector<Tensor>{dx, db.tensor};
  });
}

Tensor swiglu_composite(const Tensor& a, const Tensor& b) { return activate(a, Activation::SiLU) * b; }

namespace {

// Shared by both forms: a and b are (possibly the same) tensors, b starting b_offset elements in.
Tensor swiglu_fused(const Tensor& a, const Tensor& b, int64_t b_offset, int64_t width, int64_t in_stride,
                    const Shape& out_shape, bool split) {
  const int64_t rows = a.numel() / in_stride;
  Tensor y = Tensor::empty(out_shape, a.dtype(), a.device());
  cuda::swiglu_forward(a, b, b_offset, rows, width, in_stride, y);
  const std::vector<Tensor> inputs = split ? std::vector<Tensor>{a} : std::vector<Tensor>{a, b};
  if (!needs_grad({&a, &b})) return y;
  return record("swiglu", y, inputs, [sa = a.detach(), sb = b.detach(), b_offset, rows, width, in_stride, split](
                                         const Tensor& g) {
    if (split) {
      Tensor dab = Tensor::empty(sa.shape(), sa.dtype(), sa.device());
      cuda::swiglu_backward(g, sa, sa, b_offset, rows, width, in_stride, dab, dab);
      return std::vector<Tensor>{dab};
    }
    Tensor da = Tensor::empty(sa.shape(), sa.dtype(), sa.device());
    Tensor db = Tensor::empty(sb.shape(), sb.dtype(), sb.device());
    cuda::swiglu_backward(g, sa, sb, 0, rows, width, in_stride, da, db);
    return std::vector<Tensor>{da, db};
  });
}

}  // namespace

Tensor swiglu(const Tensor& a, const Tensor& b) {
  check_defined(a, "swiglu", "a");
  check_defined(b, "swiglu", "b");
  FT_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device(), "swiglu: a ",
           shape_str(a.shape()), " ", dtype_name(a.dtype()), " and b ", shape_str(b.shape()), " ",
           dtype_name(b.dtype()), " must match");
  FT_CHECK(a.dim() >= 1, "swiglu: inputs need at least one dim");
  if (!use_fused(a) || !fused_dtype(a) || a.numel() == 0) return swiglu_composite(a, b);
  const int64_t width = a.size(-1);
  return swiglu_fused(a, b, 0, width, width, a.shape(), false);
}

Tensor swiglu(const Tensor& ab) {
  check_defined(ab, "swiglu", "ab");
  FT_CHECK(ab.dim() >= 1 && ab.size(-1) % 2 == 0, "swiglu: the split form needs an even last dim, got ",
           shape_str(ab.shape()));
  const int64_t h = ab.size(-1) / 2;
  if (!use_fused(ab) || !fused_dtype(ab) || ab.numel() == 0)
    return swiglu_composite(narrow(ab, -1, 0, h), narrow(ab, -1, h, h));
  Shape out = ab.shape();
  out.back() = h;
  return swiglu_fused(ab, ab, h, h, 2 * h, out, true);
}

}  // namespace ft
