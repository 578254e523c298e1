// grouped_query_attention (lib/ops/attention/attention.h): the flash kernels on the projections'
// [B, T, heads·HS] outputs, or the twin that lays the heads out and repeats the key and value heads.
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/attention/attention.h"
#include "lib/ops/attention/attention_cuda.h"
#include "lib/ops/shape_ops/shape_ops.h"

namespace ft {

namespace {

/// [B, T, H·HS] -> [B, H, T, HS], with the last-two-dims transposes the primitives offer.
Tensor heads_first(const Tensor& x, int64_t heads) {
  const int64_t b = x.size(0), t = x.size(1), hs = x.size(2) / heads;
  return transpose(transpose(x).reshape({b, heads, hs, t}));
}

/// [B, H, T, HS] -> [B, T, H·HS].
Tensor heads_last(const Tensor& x) {
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

Tensor grouped_query_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                                         int64_t kv_heads, bool causal) {
  const int64_t group = heads / kv_heads;
  return heads_last(attention_composite(heads_first(q, heads), repeat_groups(heads_first(k, kv_heads), group),
                                        repeat_groups(heads_first(v, kv_heads), group), causal, 0.0, 0, Tensor()));
}

Tensor grouped_query_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, int64_t kv_heads,
                               bool causal) {
  check_grouped_inputs(q, k, v, heads, kv_heads);
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
