#include "lib/ops/attention/attention.h"

#include <array>
#include <cmath>
#include <limits>
#include <memory>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/attention/attention_cuda.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/ops/softmax/softmax.h"

namespace ft {

namespace {

void check_dropout_args(const char* op, const Tensor& x, double dropout_p, const Tensor& offset) {
  FT_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ", dropout_p);
  if (dropout_p > 0.0) check_philox_offset(op, x, offset);
}

bool fused_ok(const Tensor& x, int64_t head_size) {
  if constexpr (kCudaBuild)
    return use_fused(x) && x.dtype() == DType::BF16 && x.numel() > 0 && cuda::attention_supported(head_size);
  return false;
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

/// Key or value heads [B, NKV, T, HS] repeated for their query groups: [B, NKV·group, T, HS],
/// query head h reading key head h / group, as transformers' repeat_kv lays them out.
Tensor repeat_groups(const Tensor& x, int64_t group) {
  if (group == 1) return x;
  const int64_t b = x.size(0), kv = x.size(1), t = x.size(2), hs = x.size(3);
  const Tensor one = x.reshape({b, kv, 1, t * hs});
  return cat(std::vector<Tensor>(static_cast<size_t>(group), one), 2).reshape({b, kv * group, t, hs});
}

/// x [B, T, H·HS] through a RoPE op (rope or rope_composite) on its [B, T, H, HS] view.
Tensor turned_heads(const Tensor& x, int64_t heads, const RopeConfig& config,
                    Tensor (*rope_op)(const Tensor&, const RopeConfig&)) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  return rope_op(x.reshape({b, t, heads, c / heads}), config).reshape({b, t, c});
}

void check_grouped_inputs(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, int64_t kv_heads) {
  check_defined(q, "grouped_query_attention", "q");
  check_defined(k, "grouped_query_attention", "k");
  check_defined(v, "grouped_query_attention", "v");
  FT_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "grouped_query_attention: ", kv_heads,
           " key/value heads must divide ", heads, " query heads");
  FT_CHECK(q.dim() == 3 && q.size(2) % heads == 0, "grouped_query_attention: q must be [B, T, NH·HS] for ", heads,
           " heads, got ", shape_str(q.shape()));
  const int64_t hs = q.size(2) / heads;
  const Shape kv_shape{q.size(0), q.size(1), kv_heads * hs};
  FT_CHECK(k.shape() == kv_shape && v.shape() == kv_shape, "grouped_query_attention: k and v must be ",
           shape_str(kv_shape), " for ", kv_heads, " key/value heads of size ", hs, ", got ", shape_str(k.shape()),
           " and ", shape_str(v.shape()));
  FT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype() && k.device() == q.device() && v.device() == q.device(),
           "grouped_query_attention: q, k, v must share dtype and device");
}

}  // namespace

namespace {
FlashKernels flash_kernels_choice = FlashKernels::PreferHopper;
}  // namespace

void set_flash_kernels(FlashKernels choice) { flash_kernels_choice = choice; }
FlashKernels flash_kernels() { return flash_kernels_choice; }

bool hopper_flash_available() {
  if constexpr (kCudaBuild) return cuda::hopper_flash_supported();
  return false;
}

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
  if constexpr (kCudaBuild) {
    if (fused_ok(q, hs)) {
      const cuda::HeadStrides contiguous{heads * t * hs, t * hs, hs};
      return cuda::attention_fused({q, k, v}, 0, {b, heads, t, hs}, contiguous, contiguous, q.shape(), contiguous,
                                   causal, dropout_p, seed, offset);
    }
  }
  return attention_composite(q, k, v, causal, dropout_p, seed, offset);
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
  if constexpr (kCudaBuild)
    if (fused_ok(qkv, hs))
      return cuda::attention_fused({qkv}, c, {b, heads, t, hs}, {t * 3 * c, hs, 3 * c}, {t * 3 * c, hs, 3 * c},
                                   {b, t, c}, {t * c, hs, c}, causal, dropout_p, seed, offset);
  return attention_qkv_composite(qkv, heads, causal, dropout_p, seed, offset);
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
  if constexpr (kCudaBuild)
    if (fused) {
      check_dropout_args("qkv_attention", x, dropout_p, offset);
      return cuda::qkv_attention_fused(x, weight, bias, heads, causal, dropout_p, seed, offset);
    }
  return attention_qkv(linear(x, weight, bias), heads, causal, dropout_p, seed, offset);
}

Tensor grouped_query_attention_composite(const Tensor& q_in, const Tensor& k_in, const Tensor& v, int64_t heads,
                                         int64_t kv_heads, bool causal, const std::optional<RopeConfig>& rope) {
  const int64_t group = heads / kv_heads;
  const Tensor q = rope ? turned_heads(q_in, heads, *rope, rope_composite) : q_in;
  const Tensor k = rope ? turned_heads(k_in, kv_heads, *rope, rope_composite) : k_in;
  return merge_heads(attention_composite(split_heads(q, heads), repeat_groups(split_heads(k, kv_heads), group),
                                        repeat_groups(split_heads(v, kv_heads), group), causal, 0.0, 0, Tensor()));
}

Tensor grouped_query_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, int64_t kv_heads,
                               bool causal, const std::optional<RopeConfig>& rope) {
  check_grouped_inputs(q, k, v, heads, kv_heads);
  if (rope) {  // RoPE is its own op first (its kernel where it has one), then the attention
    FT_CHECK(q.size(2) / heads % 2 == 0, "grouped_query_attention: RoPE needs an even head size, got ",
             q.size(2) / heads);
    check_rope_config(*rope);
    return grouped_query_attention(turned_heads(q, heads, *rope, ft::rope), turned_heads(k, kv_heads, *rope, ft::rope),
                                   v, heads, kv_heads, causal);
  }
  const int64_t b = q.size(0), t = q.size(1), hs = q.size(2) / heads;
  if constexpr (kCudaBuild) {
    if (use_fused(q) && q.dtype() == DType::BF16 && q.numel() > 0 && cuda::attention_supported(hs)) {
      const cuda::HeadStrides q_strides{t * heads * hs, hs, heads * hs};
      const cuda::HeadStrides kv_strides{t * kv_heads * hs, hs, kv_heads * hs};
      return cuda::attention_fused({q, k, v}, 0, {b, heads, t, hs, kv_heads}, q_strides, kv_strides, q.shape(),
                                   q_strides, causal, 0.0, 0, Tensor());
    }
  }
  return grouped_query_attention_composite(q, k, v, heads, kv_heads, causal);
}

}  // namespace ft
