// The Llama architecture (Llama 2 and 3, and the models shaped like them): token embedding,
// pre-RMSNorm decoder layers of grouped-query attention with rotary embeddings (Llama 3's
// frequency scaling included) and a SwiGLU MLP, no biases, a final RMSNorm and a tied or untied
// head. Parameter names are Hugging Face's LlamaForCausalLM ones (model.layers.{i}.self_attn.
// q_proj.weight, ...), so its safetensors load by name.
//
// The residual adds run inside the RMSNorms' kernels (add_rms_norm); the attention reads the
// projections' outputs in place, each key/value head once for its query group
// (grouped_query_attention), which turns Q and K by RoPE first (the rope op's kernel).
//
// B: batch, T: tokens, C: hidden size, NH: query heads, NKV: key/value heads, HS: head size,
// I: the MLP's width, V: vocabulary.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layers/embedding.h"
#include "layers/linear.h"
#include "layers/lora.h"
#include "layers/module.h"
#include "lib/ops/rope/rope.h"
#include "models/causal_lm.h"

namespace ft {

struct LlamaConfig {
  int64_t vocab = 32000;
  int64_t hidden = 4096;        ///< C
  int64_t intermediate = 11008;  ///< I
  int64_t layers = 32;
  int64_t heads = 32;            ///< NH
  int64_t kv_heads = 32;         ///< NKV, dividing NH
  int64_t head_dim = 0;          ///< HS; 0: C / NH
  int64_t max_positions = 4096;  ///< the longest T
  double rms_eps = 1e-6;
  RopeConfig rope;
  bool tie_embeddings = false;
  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden / heads; }
  /// An ft::Error naming the field unless the sizes fit together.
  void check() const;
  /// Every parameter of a Llama of these sizes.
  int64_t parameter_count() const;
  /// Llama-3.2-1B's shape: 16 layers, C 2048, 32 query and 8 KV heads, I 8192, tied, RoPE θ 500,000
  /// with Llama 3's scaling (factor 32 over 8,192 positions), context 131,072.
  static LlamaConfig llama_3_2_1b(int64_t vocab = 128256);
  /// Llama-3.1-8B's shape: 32 layers, C 4096, 32 query and 8 KV heads, I 14,336, untied, RoPE
  /// θ 500,000 with Llama 3's scaling (factor 8 over 8,192 positions), context 131,072.
  static LlamaConfig llama_3_1_8b(int64_t vocab = 128256);
};

class LlamaDecoderLayer : public Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& config, Generator& gen);
  /// The layer's output as residual + pending: the MLP's output is not yet added, so that the
  /// next RMSNorm adds it in its own kernel (add_rms_norm), as the attention's output is added
  /// by the post-attention norm's.
  struct Output {
    Tensor residual, pending;
  };
  /// The layer on residual + pending (pending undefined: residual alone), both [B, T, C].
  Output forward_block(const Tensor& residual, const Tensor& pending);
  /// x [B, T, C] -> [B, T, C].
  Tensor forward(const Tensor& x) override;
  /// Wraps the named projections (Llama::lora_targets()) in LoRA adapters.
  void add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, Generator& gen);

 private:
  Tensor attend(const Tensor& normed);  // [B, T, C] -> [B, T, NH·HS], before o_proj
  Tensor mlp(const Tensor& normed);     // [B, T, C] -> [B, T, C], the gate, up and down projections
  LlamaConfig config_;
  Tensor input_norm_, post_attention_norm_;
  std::shared_ptr<Module> q_proj_, k_proj_, v_proj_, o_proj_, gate_proj_, up_proj_, down_proj_;
};

class Llama : public CausalLM {
 public:
  /// Weights drawn as transformers' LlamaPreTrainedModel does: N(0, 0.02²) for every linear
  /// and the embedding, the norms at 1.
  Llama(const LlamaConfig& config, uint64_t seed);
  /// Final hidden states [B, T, C] for ids [B, T].
  Tensor hidden(const Tensor& ids);
  /// Next-token logits [B, T, V].
  Tensor logits(const Tensor& ids) override;
  /// Mean next-token cross-entropy of ids [B, T] against targets [B, T].
  Tensor loss(const Tensor& ids, const Tensor& targets) override;
  const LlamaConfig& config() const { return config_; }
  /// The head's weight [V, C]: lm_head's, or the embedding's when tied.
  const Tensor& head_weight() const;

  /// LoRA fine-tuning: freezes every parameter, then wraps the `targets` projections of every
  /// layer, named as Hugging Face names them (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
  /// down_proj), in LoRA adapters, which alone train: model.layers.{i}.self_attn.q_proj.lora_A.weight
  /// [r, in] and ...lora_B.weight [out, r] (B starts at zero, so the model starts unchanged), on
  /// the model's device and dtype. An unknown or repeated target, or none, is an ft::Error.
  void add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, uint64_t seed) override;
  /// The adapters' parameters by name (empty without add_lora).
  std::map<std::string, Tensor> lora_state_dict() const override;
  std::vector<std::string> lora_target_names() const override { return lora_targets(); }
  CausalLMShape shape() const override;
  std::vector<std::vector<Tensor>> layer_parameters() const override;
  /// The shape of a Llama of these sizes, without building one.
  static CausalLMShape shape_of(const LlamaConfig& config);
  /// The target names add_lora takes, in layer order.
  static const std::vector<std::string>& lora_targets();

 private:
  LlamaConfig config_;
  std::shared_ptr<Embedding> embed_;
  std::vector<std::shared_ptr<LlamaDecoderLayer>> layers_;
  Tensor norm_;
  std::shared_ptr<Linear> lm_head_;
};

}  // namespace ft
