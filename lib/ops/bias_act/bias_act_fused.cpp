// The fused paths of bias_act and swiglu (CUDA builds only): one kernel forward and one
// backward each, recorded beside each other. bias_act.cpp dispatches here.
#include "lib/autograd.h"
#include "lib/ops/bias_act/bias_act_cuda.h"

namespace ft::cuda {

Tensor bias_act_fused(const Tensor& x, const Tensor& bias, Activation act) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  bias_act_forward(x, bias, act, y);
  if (!needs_grad({&x, &bias})) return y;
  const bool want_bias = bias.defined() && bias.requires_grad();
  return record("bias_act", y, {x, bias}, [sx = x.detach(), sb = bias.defined() ? bias.detach() : Tensor(), act,
                                           want_bias](const Tensor& g) {
    Tensor dx = Tensor::empty(sx.shape(), sx.dtype(), sx.device());
    const GradOutput db = want_bias ? grad_output(1, true, sb.shape(), sb.dtype(), sb.device()) : GradOutput();
    bias_act_backward(g, sx, sb, act, dx, db);
    return std::vector<Tensor>{dx, db.tensor};
  });
}

Tensor swiglu_fused(const Tensor& a, const Tensor& b, int64_t b_offset, int64_t width, int64_t in_stride,
                    const Shape& out_shape, bool split) {
  const int64_t rows = a.numel() / in_stride;
  Tensor y = Tensor::empty(out_shape, a.dtype(), a.device());
  swiglu_forward(a, b, b_offset, rows, width, in_stride, y);
  const std::vector<Tensor> inputs = split ? std::vector<Tensor>{a} : std::vector<Tensor>{a, b};
  if (!needs_grad({&a, &b})) return y;
  return record("swiglu", y, inputs, [sa = a.detach(), sb = b.detach(), b_offset, rows, width, in_stride, split](
                                         const Tensor& g) {
    if (split) {
      Tensor dab = Tensor::empty(sa.shape(), sa.dtype(), sa.device());
      swiglu_backward(g, sa, sa, b_offset, rows, width, in_stride, dab, dab);
      return std::vector<Tensor>{dab};
    }
    Tensor da = Tensor::empty(sa.shape(), sa.dtype(), sa.device());
    Tensor db = Tensor::empty(sb.shape(), sb.dtype(), sb.device());
    swiglu_backward(g, sa, sb, 0, rows, width, in_stride, da, db);
    return std::vector<Tensor>{da, db};
  });
}

}  // namespace ft::cuda
