// attention's fused paths (CUDA builds only): the flash kernels with their backward recorded, and
// qkv_attention's projection whose bias gradient the attention's backward sums. attention.cpp
// dispatches here.
#include <array>
#include <memory>

#include "lib/autograd.h"
#include "lib/ops/attention/attention_cuda.h"
#include "lib/ops/linear/linear_cuda.h"
#include "lib/ops/reduce/reduce_cuda.h"

namespace ft::cuda {

namespace {
void* at_element(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.data_ptr()) + element * static_cast<int64_t>(dtype_size(t.dtype()));
}
}  // namespace

Tensor attention_fused(const std::vector<Tensor>& inputs, int64_t thirds, const AttentionShape& shape,
                       const HeadStrides& in_strides, const HeadStrides& kv_strides, const Shape& out_shape,
                       const HeadStrides& out_strides, bool causal, double dropout_p, uint64_t seed,
                       const Tensor& offset, const std::shared_ptr<BiasGradHandoff>& bias_sums) {
  auto views = [thirds](const std::vector<Tensor>& t) {
    if (t.size() == 3) return std::array<void*, 3>{t[0].data_ptr(), t[1].data_ptr(), t[2].data_ptr()};
    return std::array<void*, 3>{at_element(t[0], 0), at_element(t[0], thirds), at_element(t[0], 2 * thirds)};
  };
  const auto in = views(inputs);
  const AttentionInputs args{in[0], in[1], in[2], in_strides, kv_strides};
  const Device device = inputs[0].device();
  Tensor out = Tensor::empty(out_shape, DType::BF16, device);
  Tensor lse = Tensor::empty({shape.batch * shape.heads * shape.tokens}, DType::F32, device);
  attention_forward(shape, args, out.data_ptr(), out_strides, lse, causal, dropout_p, seed, offset);
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
                  // The kernels sum only without dropout (AttentionGrads).
                  const bool sums_wanted = bias_sums && dropout_p == 0.0;
                  const int64_t partial_rows = sums_wanted ? qkv_bias_partial_rows(shape) : 0;
                  const Tensor partials =
                      sums_wanted ? Tensor::empty({partial_rows, 3 * thirds}, DType::F32, device) : Tensor();
                  const bool summed = attention_backward(
                      shape, args, saved_out.data_ptr(), g.data_ptr(), out_strides, lse,
                      AttentionGrads{d[0], d[1], d[2], sums_wanted ? partials.data<float>() : nullptr}, causal,
                      dropout_p, seed, offset);
                  if (summed) {  // the chunks' rows added in order into the bias's gradient
                    partial_row_sums(partials, bias_sums_target(*bias_sums, 3 * thirds, device));
                    bias_sums->grad = grads[0];
                  }
                  return grads;
                });
}

Tensor qkv_attention_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t heads, bool causal,
                           double dropout_p, uint64_t seed, const Tensor& offset) {
  const int64_t b = x.size(0), t = x.size(1), in = weight.size(1), c = weight.size(0) / 3, hs = c / heads;
  const Tensor x2 = x.detach().reshape({-1, in});
  Tensor qkv = Tensor::empty({b, t, 3 * c}, x.dtype(), x.device());
  linear_forward(x2, weight, bias, Activation::None, qkv.reshape({-1, 3 * c}), Tensor());
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
  const HeadStrides qkv_strides{t * 3 * c, hs, 3 * c};
  return attention_fused({qkv}, c, {b, heads, t, hs}, qkv_strides, qkv_strides, {b, t, c}, {t * c, hs, c}, causal,
                         dropout_p, seed, offset, want_b ? handoff : nullptr);
}

}  // namespace ft::cuda
