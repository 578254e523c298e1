// Scaled dot-product attention: softmax(q·kᵀ/√HS + causal mask) · v, with optional dropout on
// the probabilities.
//
// attention(q, k, v): q, k, v [B, NH, T, HS], one dtype and device; result [B, NH, T, HS].
// attention_qkv(qkv, heads): qkv [B, T, 3C] as a fused QKV projection writes it (q, k, v the
// three C-wide thirds, head h in columns [h·HS, (h+1)·HS) of each); result [B, T, C] with the
// heads side by side, ready for the output projection. The fused kernel reads and writes
// these layouts in place; the twin splits and merges the heads with transposes.
//
// Dropout keeps probability (b, h, i, j) when philox::dropout_uniform(seed, offset, flat index) >= p,
// the same (seed, offset, index) scheme as lib/ops/dropout/dropout.h, the flat index running over
// [B, NH, T, T]; offset is a one-element i64 tensor on the data's device
// (PhiloxCounter::take(B·NH·T·T)).
//
// Fused (bf16 on CUDA, HS 64 or 128): flash attention (lib/ops/attention/attention_forward.cu, attention_backward.cu). It saves the
// output and the log-sum-exp per row ([B, NH, T] f32) and recomputes the probabilities in
// backward. Twin: matmul (scaled by 1/√HS), causal mask (where), softmax (f32 for bf16), dropout,
// cast, matmul, as separate primitive ops, the way eager frameworks run attention; every other case
// (CPU, f32, f64, other head sizes, KernelMode::Unfused) runs it.
#pragma once
#include <optional>

#include "lib/ops/rope/rope.h"
#include "lib/tensor.h"

namespace ft {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p = 0.0,
                 uint64_t seed = 0, const Tensor& offset = Tensor());
Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                           uint64_t seed, const Tensor& offset);

Tensor attention_qkv(const Tensor& qkv, int64_t heads, bool causal, double dropout_p = 0.0, uint64_t seed = 0,
                     const Tensor& offset = Tensor());
Tensor attention_qkv_composite(const Tensor& qkv, int64_t heads, bool causal, double dropout_p, uint64_t seed,
                               const Tensor& offset);

/// attention_qkv(linear(x, W, b), heads, ...): the QKV projection and the attention that reads
/// its heads straight out of it. x [..., T, IN] as linear takes it (leading dims [B]), W [3C, IN],
/// b [3C]. Fused (the linear on its cuBLASLt epilogue path, the attention's flash kernels, no
/// dropout): the backward's dQ kernel and its Δ kernel, which reads dO, also give b's gradient
/// by chunks of 128 tokens (cuda::AttentionGrads says how), and a small kernel adds the chunks,
/// where cuBLASLt's BGRADB reduction would read all of dqkv again. Two autograd nodes, as the
/// two ops record. With dropout the projection runs BGRADB;
/// elsewhere the two ops run as they are.
/// Twin: linear_composite, then attention_qkv_composite.
Tensor qkv_attention(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t heads, bool causal,
                     double dropout_p = 0.0, uint64_t seed = 0, const Tensor& offset = Tensor());
Tensor qkv_attention_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t heads, bool causal,
                               double dropout_p, uint64_t seed, const Tensor& offset);

/// Grouped-query attention as Llama runs it, straight on the projections' outputs: q [B, T, NH·HS],
/// k and v [B, T, NKV·HS], NKV dividing NH (query head h reads key/value head h / (NH / NKV));
/// result [B, T, NH·HS], the heads side by side for the output projection. No dropout. With
/// `rope`, q and k are first turned by rotary position embeddings (lib/ops/rope/rope.h): the
/// result is that of q and k each through rope.
/// Fused (bf16 on CUDA, HS 64 or 128): the flash kernels read q, k and v where the projections
/// wrote them and write the result in place; each key/value head is read for its whole group,
/// nothing repeated in memory, and the backward adds a group's dK and dV in registers
/// (lib/ops/attention/attention_backward.cu). With `rope`, the rope op turns q and k first (its
/// kernel: one pass over each, each way). Turning them inside the flash kernels' loads was built
/// and measured slower (docs/design-notes.md). Twin: rope_composite on q and k, the heads split
/// by transposes, k and v repeated for their groups (cat), attention_composite, the heads merged.
Tensor grouped_query_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, int64_t kv_heads,
                               bool causal, const std::optional<RopeConfig>& rope = std::nullopt);
Tensor grouped_query_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                                         int64_t kv_heads, bool causal,
                                         const std::optional<RopeConfig>& rope = std::nullopt);

/// Which flash kernels the fused path runs. PreferHopper (the default): the Hopper kernels
/// (wgmma and TMA; lib/ops/attention/attention_hopper.cu, attention_hopper_backward.cu) where the
/// device is sm_90, the head size is one they take and TMA can address the tensors, else the
/// mma.sync kernels. MmaSync: the mma.sync kernels everywhere, for comparisons and tests.
/// Process-wide.
enum class FlashKernels { PreferHopper, MmaSync };
void set_flash_kernels(FlashKernels choice);
FlashKernels flash_kernels();
/// Whether this build and device can run the Hopper kernels at all (false in a CPU-only build).
bool hopper_flash_available();
}  // namespace ft
