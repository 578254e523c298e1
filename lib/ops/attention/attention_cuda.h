// The CUDA side of attention: its fused paths (attention_fused.cpp) and the flash kernels'
// launchers (attention_forward.cu, attention_backward.cu, attention_hopper*.cu). Compiled only in a CUDA build; callers reach it
// under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "lib/ops/attention/attention.h"
#include "lib/ops/linear/linear.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// Element strides of a [B, NH, T, HS] view with a contiguous last dim: element (b, h, t, d)
/// is at data + b·batch + h·head + t·token + d.
struct HeadStrides {
  int64_t batch, head, token;
};
/// `heads` query heads; grouped-query attention gives `kv_heads` (dividing heads) key and value
/// heads, query head h reading key/value head h / (heads / kv_heads); 0 means as many as heads.
struct AttentionShape {
  int64_t batch, heads, tokens, head_size;
  int64_t kv_heads = 0;
  int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t group() const { return heads / key_value_heads(); }
};
/// bf16 q (`strides`), k and v (`kv_strides`): three tensors, or the thirds of one qkv tensor.
struct AttentionInputs {
  const void *q, *k, *v;
  HeadStrides strides, kv_strides;
};
/// Where backward writes dq, dk, dv: laid out as the inputs (dk and dv by kv_strides). For the thirds of one qkv tensor,
/// `qkv_bias_partials` (f32, qkv_bias_partial_rows(shape) × 3·NH·HS, or null) asks for the QKV
/// projection's bias gradient by chunks of tokens, a row a chunk of a batch entry, [q | k | v]
/// columns as in qkv, which add up to it: dq's column sums as stored, 0 for k (a softmax's
/// gradient sums to 0 along its row) and dO's column sums for v (a row's probabilities sum to
/// 1), in exact arithmetic the column sums of dk and dv. Only without GQA (one key head a query
/// head).
struct AttentionGrads {
  void *dq, *dk, *dv;
  float* qkv_bias_partials = nullptr;
};
/// Rows of AttentionGrads::qkv_bias_partials: B times the chunks of T.
int64_t qkv_bias_partial_rows(const AttentionShape& shape);

bool attention_supported(int64_t head_size);
/// Whether this build and device can run the Hopper kernels (sm_90); hopper_flash_available() asks it.
bool hopper_flash_supported();

/// out (bf16, out_strides) and lse ([B·NH·T] f32, natural log).
void attention_forward(const AttentionShape& shape, const AttentionInputs& in, void* out, HeadStrides out_strides,
                       const Tensor& lse, bool causal, double dropout_p, uint64_t seed, const Tensor& offset);
/// Returns whether it wrote grads.qkv_bias_partials: it does without dropout (which breaks the
/// v identity); with dropout the caller sums dq, dk and dv itself.
bool attention_backward(const AttentionShape& shape, const AttentionInputs& in, const void* out, const void* dout,
                        HeadStrides out_strides, const Tensor& lse, const AttentionGrads& grads, bool causal,
                        double dropout_p, uint64_t seed, const Tensor& offset);


/// The flash kernels over q, k, v found in `inputs` (three tensors, or the thirds of one qkv
/// tensor `thirds` elements apart), with the backward recorded; k and v are read by
/// `kv_strides`, q by `in_strides`. With `bias_sums` (one qkv tensor), the backward also leaves
/// there the column sums of the dqkv it writes, when its kernels summed them.
Tensor attention_fused(const std::vector<Tensor>& inputs, int64_t thirds, const AttentionShape& shape,
                       const HeadStrides& in_strides, const HeadStrides& kv_strides, const Shape& out_shape,
                       const HeadStrides& out_strides, bool causal, double dropout_p, uint64_t seed,
                       const Tensor& offset, const std::shared_ptr<BiasGradHandoff>& bias_sums = nullptr);
/// qkv_attention's fused path: the projection on linear's epilogue path, then attention_fused.
Tensor qkv_attention_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t heads, bool causal,
                           double dropout_p, uint64_t seed, const Tensor& offset);

}  // namespace ft::cuda
