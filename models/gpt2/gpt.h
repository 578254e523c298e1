// GPT-2: token and position embeddings (added in one fused op), pre-LayerNorm transformer
// blocks (the residual add of each sub-layer fused into the next norm with add_layer_norm), a
// fused QKV projection read in place by flash attention, an MLP whose bias + GELU ride in its
// first linear, a final norm, and the loss through
// linear_cross_entropy against the tied token embedding. add_lora wraps chosen linears in LoRA
// adapters for fine-tuning (layers/lora.h).
//
// B: batch, T: sequence length, C: channels, NH: heads, HS = C / NH, V: vocabulary.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/embedding.h"
#include "layers/linear.h"
#include "layers/lora.h"
#include "layers/module.h"
#include "lib/ops/norm/layer_norm.h"
#include "models/causal_lm.h"

namespace ft {

struct GPTConfig {
  int64_t vocab = 50304;
  int64_t block_size = 1024;  // longest T
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t channels = 768;
  /// Every parameter of a GPT of these sizes (the head is the tied embedding).
  int64_t parameter_count() const;
};

/// A sub-layer's output projection not yet run. The add-and-norm after it runs it, so that the
/// projection, the residual add and the LayerNorm are one op (linear_add_layer_norm, whose
/// norm backward gives the projection its bias gradient).
struct PendingProjection {
  Module* proj = nullptr;  // a Linear, or a LoRALinear wrapping one; null: nothing pending
  Tensor input;
};

/// add_layer_norm(proj(input), residual, w, b), one op where proj is a plain Linear.
AddNormResult project_add_layer_norm(const PendingProjection& pending, const Tensor& residual, const Tensor& weight,
                                     const Tensor& bias);

class GPTBlock : public Module {
 public:
  GPTBlock(const GPTConfig& config, Generator& gen);
  /// Runs the block on residual + pending (the previous block's MLP projection, run here; none
  /// for the first block). Returns {new residual, this block's MLP projection, not yet run}.
  std::pair<Tensor, PendingProjection> forward_block(const Tensor& residual, const PendingProjection& pending);
  /// The whole block on x [B, T, C], its MLP projection added: what recomputation runs.
  Tensor forward(const Tensor& x) override;
  /// Wraps the named linears (qkv, attn_proj, fc, mlp_proj) in LoRA adapters.
  void add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, Generator& gen);

 private:
  Tensor attend(const Tensor& x);  // [B, T, C] -> [B, T, C], before the output projection
  GPTConfig config_;
  Tensor ln1_w_, ln1_b_, ln2_w_, ln2_b_;
  // Linears, or LoRALinears wrapping them once add_lora ran.
  std::shared_ptr<Module> qkv_, attn_proj_, fc_, mlp_proj_;
};

class GPT : public CausalLM {
 public:
  GPT(const GPTConfig& config, uint64_t seed);
  /// Final hidden states [B, T, C] for ids [B, T].
  Tensor hidden(const Tensor& ids);
  /// Next-token logits [B, T, V] (the tied head, materialized: for sampling and evaluation).
  Tensor logits(const Tensor& ids) override;
  /// Mean next-token cross-entropy of ids [B, T] against targets [B, T].
  Tensor loss(const Tensor& ids, const Tensor& targets) override;
  const GPTConfig& config() const { return config_; }
  /// LoRA fine-tuning: freezes every parameter, then wraps the `targets` linears of every
  /// block (names from lora_targets()) in LoRA adapters, which alone train. Adapter parameters
  /// are `h.{i}.attn.c_attn.lora_A.weight` and the like, on the model's device and dtype.
  void add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, uint64_t seed) override;
  /// The adapters' parameters by name (empty without add_lora).
  std::map<std::string, Tensor> lora_state_dict() const override;
  std::vector<std::string> lora_target_names() const override;
  CausalLMShape shape() const override;
  std::vector<std::vector<Tensor>> layer_parameters() const override;
  /// The shape of a GPT of these sizes, without building one.
  static CausalLMShape shape_of(const GPTConfig& config);
  /// The target names add_lora takes, and the module path each wraps.
  static const std::vector<std::pair<std::string, std::string>>& lora_targets();
  /// Throws ft::Error, its message starting with `who`, unless `targets` is a non-empty list of
  /// lora_targets() names.
  static void check_lora_targets(const std::vector<std::string>& targets, const std::string& who);

 private:
  GPTConfig config_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::vector<std::shared_ptr<GPTBlock>> blocks_;
  Tensor lnf_w_, lnf_b_;
};

}  // namespace ft
