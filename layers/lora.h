// LoRALinear: a frozen Linear with a trainable low-rank adapter, as Hugging Face PEFT's LoRA
// layer: y = act(x·Wᵀ + b + s·(drop(x)·Aᵀ)·Bᵀ) through lib/ops/lora_linear/lora_linear.h, s = α/r (α/√r with
// rsLoRA). A [r, IN] starts as PEFT's (Kaiming-uniform, ±1/√IN) and B [OUT, r] at zero, so a new
// adapter changes nothing. Parameters: the base's `weight` and `bias` (frozen, under the base's
// own names, so a checkpoint of the model without adapters still loads) and `lora_A.weight`,
// `lora_B.weight` (trainable; PEFT's names).
#pragma once
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "layers/linear.h"
#include "layers/module.h"

namespace ft {

struct LoRAConfig {
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;  // on the adapter's input, in training only
  bool rslora = false;   // s = α/√r instead of α/r
  uint64_t seed = 0;     // the dropout's Philox key
  /// s: α/r, or α/√r for rsLoRA.
  double scale() const;
  /// Throws ft::Error naming what is wrong (a rank below 1, a dropout outside [0, 1), a
  /// non-finite α).
  void check() const;
};

class LoRALinear : public Module {
 public:
  /// Wraps `base` (its weight and bias are frozen here); the adapter is created on the base
  /// weight's device and dtype, A drawn from gen. The rank must not exceed min(IN, OUT).
  LoRALinear(const std::shared_ptr<Linear>& base, const LoRAConfig& config, Generator& gen);
  Tensor forward(const Tensor& x) override;

  /// Folds s·B·A into W (summed in f32, rounded once), keeping W's values to restore; forward
  /// then is the base linear's alone. Merging twice is an error.
  void merge();
  /// Restores W bit for bit from before merge(). Unmerging an unmerged layer is an error.
  void unmerge();
  bool merged() const { return unmerged_weight_.defined(); }

  const Tensor& weight() const { return weight_; }
  const Tensor& lora_a() const { return lora_a_; }
  const Tensor& lora_b() const { return lora_b_; }
  const LoRAConfig& config() const { return config_; }

 private:
  LoRAConfig config_;
  Activation activation_;
  Tensor weight_, bias_, lora_a_, lora_b_;
  Tensor unmerged_weight_;  // W before merge(), while merged
};

/// The LoRA adapters' parameters of `model` by name (...lora_A.weight, ...lora_B.weight), detached.
std::map<std::string, Tensor> lora_parameters(const Module& model);

/// Throws ft::Error, its message starting with `who`, unless `targets` is a non-empty list of
/// `known` names, each once (a model family's adaptable linears).
void check_lora_targets(const std::vector<std::string>& targets, const std::vector<std::string>& known,
                        const std::string& who);

}  // namespace ft
