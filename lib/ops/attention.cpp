#include "lib/ops/attention.h"

#include <array>
#include <cmath>
#include <limits>
#include <memory>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/cuda/launchers.h"
#include "lib/kernel_mode.h"
#include "lib/ops/dropout.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/linear.h"
#include "lib/ops/matmul.h"
#include "lib/ops/shape_ops.h"
#include "lib/ops/softmax.h"

namespace ft {

namespace {

void check_dropout_args(const char* op, const Tensor& x, double dropout_p, const Tensor& offset) {
  FT_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ", dropout_p);
  if (dropout_p > 0.0) check_philox_offset(op, x, offset);
}

bool fused_ok(const Tensor& x, int64_t head_size) {
  return use_fused(x) && x.dtype() == DType::BF16 && x.numel() > 0 && cuda::attention_supported(head_size);
}

// [B, T, NH·HS] <-> [B, NH, T, HS], with the last-two-dims transposes the primitives offer.
Tensor split_heads(const Tensor& x, int64_t heads) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), hs = c / heads;
  return transpose(transpose(x).reshape({b, heads, hs, t}));
}
Tensor merge_heads(const Tensor& x) {
  const int64_t b = x.size(0), heads = x.size(1), t = x.size(2), hs = x.size(3);
  return transpose(transpose(x).reshape({b, heads * hs, t}));
}

void* at_element(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.data_ptr()) + element * static_cast<int64_t>(dtype_size(t.dtype()));
}

// The flash kernels over q, k, v found in `inputs` (three tensors, or the thirds of one qkv
// tensor `thirds` elements apart), with the backward recorded. Shared by the entry points. With
// `bias_sums` (one qkv tensor), the backward also leaves there the column sums of the dqkv it
// writes, when its kernels summed them.
Tensor fused_attention(const std::vector<Tensor>& inputs, int64_t thirds, const cuda::AttentionShape& shape,
                       const cuda::HeadStrides& in_strides, const Shape& out_shape,
                       const cuda::HeadStrides& out_strides, bool causal, double dropout_p, uint64_t seed,
                       const Tensor& offset, const std::shared_ptr<BiasGradHandoff>& bias_sums = nullptr) {
  auto views = [thirds](const std::vector<Tensor>& t) {
    if (t.size() == 3) return std::array<void*, 3>{t[0].data_ptr(), t[1].data_ptr(), t[2].data_ptr()};
    return std::array<void*, 3>{at_element(t[0], 0), at_element(t[0], thirds), at_element(t[0], 2 * thirds)};
  };
  const auto in = views(inputs);
  const cuda::AttentionInputs args{in[0], in[1], in[2], in_strides};
  const Device device = inputs[0].device();
  Tensor out = Tensor::empty(out_shape, DType::BF16, device);
  Tensor lse = Tensor::empty({shape.batch * shape.heads * shape.tokens}, DType::F32, device);
  cuda::attention_forward(shape, args, out.data_ptr(), out_strides, lse, causal, dropout_p, seed, offset);
  bool any_grad = false;
  for (const Tensor& t : inputs) any_grad = any_grad || needs_grad({&t});
  if (!any_grad) return out;
  std::vector<Tensor> saved;
  for (const Tensor& t : inputs) saved.push_back(t.detach());
  return record("attention", out, inputs,
                [=, saved_out = out.detach()](const Tensor& g) {
                  std::vector<Tensor> grads;
                  for (const Tensor& t : saved) grads.push_back(Tensor::empty(t.shape(), DType::BF16, t.device()));
                  const auto d = views(grads);
                  // The kernels sum only without dropout (cuda::AttentionGrads).
                  const bool sums_wanted = bias_sums && dropout_p == 0.0;
                  const int64_t partial_rows = sums_wanted ? cuda::qkv_bias_partial_rows(shape) : 0;
                  const Tensor partials =
                      sums_wanted ? Tensor::empty({partial_rows, 3 * thirds}, DType::F32, device) : Tensor();
                  const bool summed = cuda::attention_backward(
                      shape, args, saved_out.data_ptr(), g.data_ptr(), out_strides, lse,
                      cuda::AttentionGrads{d[0], d[1], d[2], sums_wanted ? partials.data<float>() : nullptr}, causal,
                      dropout_p, seed, offset);
                  if (summed) {  // the chunks' rows added in order into the bias's gradient
                    cuda::partial_row_sums(partials, bias_sums_target(*bias_sums, 3 * thirds, device));
                    bias_sums->grad = grads[0];
                  }
                  return grads;
                });
}

}  // namespace

Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                           uint64_t seed, const Tensor& offset) {
  const int64_t t = q.size(-2), hs = q.size(-1);
  // The softmax is computed in f32 for bf16 inputs and its probabilities kept in f32, as eager
  // frameworks do under autocast; the 1/√HS scale rides on the product (cuBLAS's alpha).
  const DType compute = q.dtype() == DType::BF16 ? DType::F32 : q.dtype();
  Tensor scores = matmul(q, k, false, true, 1.0 / std::sqrt(static_cast<double>(hs)));
  if (causal) {
    // Query i sees keys j <= i; the rest become -inf before the softmax, so they get probability 0.
    Tensor cols = Tensor::arange(t, DType::I64, q.device());
    Tensor visible = le(cols, cols.reshape({t, 1}));  // [T, T]
    scores = where(visible, scores, scalar_like(scores, -std::numeric_limits<double>::infinity()));
  }
  Tensor probs = softmax(scores, compute);
  if (dropout_p > 0.0) probs = dropout_composite(probs, dropout_p, seed, offset);
  return matmul(cast(probs, q.dtype()), v);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p, uint64_t seed,
                 const Tensor& offset) {
  check_defined(q, "attention", "q");
  check_defined(k, "attention", "k");
  check_defined(v, "attention", "v");
  FT_CHECK(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(), "attention: q, k, v must share one ",
           "[B, NH, T, HS] shape, got ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  FT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype() && k.device() == q.device() && v.device() == q.device(),
           "attention: q, k, v must share dtype and device");
  check_dropout_args("attention", q, dropout_p, offset);
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2), hs = q.size(3);
  if (!fused_ok(q, hs)) return attention_composite(q, k, v, causal, dropout_p, seed, offset);
  const cuda::HeadStrides contiguous{heads * t * hs, t * hs, hs};
  return fused_attention({q, k, v}, 0, {b, heads, t, hs}, contiguous, q.shape(), contiguous, causal, dropout_p, seed,
                         offset);
}

Tensor attention_qkv_composite(const Tensor& qkv, int64_t heads, bool causal, double dropout_p, uint64_t seed,
                               const Tensor& offset) {
  const int64_t c = qkv.size(2) / 3;
  return merge_heads(attention_composite(split_heads(narrow(qkv, -1, 0, c), heads),
                                         split_heads(narrow(qkv, -1, c, c), heads),
                                         split_heads(narrow(qkv, -1, 2 * c, c), heads), causal, dropout_p, seed,
                                         offset));
}

Tensor attention_qkv(const Tensor& qkv, int64_t heads, bool causal, double dropout_p, uint64_t seed,
                     const Tensor& offset) {
  check_defined(qkv, "attention_qkv", "qkv");
  FT_CHECK(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0, "attention_qkv: qkv must be [B, T, 3C] ",
           "with C divisible by ", heads, " heads, got ", shape_str(qkv.shape()));
  check_dropout_args("attention_qkv", qkv, dropout_p, offset);
  const int64_t b = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3, hs = c / heads;
  if (!fused_ok(qkv, hs)) return attention_qkv_composite(qkv, heads, causal, dropout_p, seed, offset);
  return fused_attention({qkv}, c, {b, heads, t, hs}, {t * 3 * c, hs, 3 * c}, {b, t, c}, {t * c, hs, c}, causal,
                         dropout_p, seed, offset);
}

Tensor qkv_attention_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t heads, bool causal,
                               double dropout_p, uint64_t seed, const Tensor& offset) {
  return attention_qkv_composite(linear_composite(x, weight, bias, Activation::None), heads, causal, dropout_p, seed,
                                 offset);
}

Tensor qkv_attention(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t heads, bool causal,
                     double dropout_p, uint64_t seed, const Tensor& offset) {
  check_linear_inputs(x, weight, bias);
  const bool fused = linear_takes_epilogue_path(x, weight, bias, Activation::None) && x.dim() == 3 && heads > 0 &&
                     weight.size(0) % (3 * heads) == 0 && fused_ok(x, weight.size(0) / 3 / heads);
  if (!fused) return attention_qkv(linear(x, weight, bias), heads, causal, dropout_p, seed, offset);
  check_dropout_args("qkv_attention", x, dropout_p, offset);
  const int64_t b = x.size(0), t = x.size(1), in = weight.size(1), c = weight.size(0) / 3, hs = c / heads;
  const Tensor x2 = x.detach().reshape({-1, in});
  Tensor qkv = Tensor::empty({b, t, 3 * c}, x.dtype(), x.device());
  cuda::linear_forward(x2, weight, bias, Activation::None, qkv.reshape({-1, 3 * c}), Tensor());
  // Two nodes, as linear then attention_qkv record: the projection's, whose bias gradient the
  // attention's backward hands over.
  auto handoff = std::make_shared<BiasGradHandoff>();
  handoff->bias = bias;
  const bool want_x = x.requires_grad(), want_w = weight.requires_grad(), want_b = bias.requires_grad();
  if (needs_grad({&x, &weight, &bias}))
    qkv = record("linear", qkv, {x, weight, bias},
                 [x2, w = weight.detach(), handoff, want_x, want_w, want_b, x_shape = x.shape()](const Tensor& g) {
                   return linear_backward_with_handoff(g, x2, w, *handoff, want_x, want_w, want_b, x_shape);
                 });
  return fused_attention({qkv}, c, {b, heads, t, hs}, {t * 3 * c, hs, 3 * c}, {b, t, c}, {t * c, hs, c}, causal,
                         dropout_p, seed, offset, want_b ? handoff : nullptr);
}

}  // namespace ft
