// CausalLM: what a language-model trainer asks of a decoder-only model, whichever its family
// (GPT-2: models/gpt2/gpt.h, Llama: models/llama/llama.h): next-token logits and loss, LoRA on
// the family's named linears, and the sizes that describe and price a step. ft-gpt2
// (examples/gpt2) trains either family through it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "layers/layer_gather.h"
#include "layers/lora.h"
#include "layers/module.h"
#include "lib/ops/recompute/recompute.h"

namespace ft {

/// The sizes a trainer prints and prices a step by.
struct CausalLMShape {
  std::string family;           ///< "gpt2" or "llama"
  int64_t layers = 0;           ///< L
  int64_t width = 0;            ///< C, the residual stream
  int64_t heads = 0;            ///< query heads
  int64_t kv_heads = 0;         ///< key and value heads (as many as the query heads without GQA)
  int64_t attention_width = 0;  ///< query heads × head size: attention's FLOPs are 6·L·this·T a token
  int64_t vocab = 0;            ///< V, the head's rows
  int64_t max_seq = 0;          ///< the longest T
  int64_t parameters = 0;       ///< every parameter, before any adapter
};

class CausalLM : public Module {
 public:
  /// How the layers' activations reach backward (lib/ops/recompute/recompute.h; None unless set).
  /// The loss is the same bit for bit; the gradients too on the CPU, and within bf16 rounding on
  /// CUDA, where a recomputed layer's last residual add runs outside the next norm's kernel.
  void set_recompute(Recompute mode) { recompute_ = mode; }
  Recompute recompute_mode() const { return recompute_; }
  /// Next-token logits [B, T, V] for ids [B, T].
  virtual Tensor logits(const Tensor& ids) = 0;
  /// Mean next-token cross-entropy of ids [B, T] against targets [B, T].
  virtual Tensor loss(const Tensor& ids, const Tensor& targets) = 0;
  /// LoRA fine-tuning: freezes every parameter and wraps the named linears of every layer in
  /// adapters (the family's names: lora_target_names()), which alone train.
  virtual void add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, uint64_t seed) = 0;
  /// The adapters' parameters by name (empty without add_lora).
  virtual std::map<std::string, Tensor> lora_state_dict() const = 0;
  /// The names add_lora takes, in layer order.
  virtual std::vector<std::string> lora_target_names() const = 0;
  virtual CausalLMShape shape() const = 0;
  /// Each layer's parameters, in layer order (ZeRO-3's units: DataPartition::units).
  virtual std::vector<std::vector<Tensor>> layer_parameters() const = 0;
  /// Called around every layer's forward from now on (ZeRO-3's ParameterGather; null: nothing).
  /// It must outlive the model's forwards.
  void set_layer_gather(LayerGather* gather) { gather_ = gather; }

 protected:
  /// The layer loop's calls to the LayerGather, if any.
  void enter_layer(size_t layer) {
    if (gather_) gather_->before_layer(layer);
  }
  Tensor leave_layer(size_t layer, const Tensor& output) {
    return gather_ && output.defined() ? gather_->after_layer(layer, output) : output;
  }

  Recompute recompute_ = Recompute::None;
  LayerGather* gather_ = nullptr;
};

}  // namespace ft
