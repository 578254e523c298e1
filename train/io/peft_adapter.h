// LoRA adapters of a GPT-2 or a Llama in Hugging Face PEFT's on-disk format, so an adapter trained
// here loads with `PeftModel.from_pretrained(GPT2LMHeadModel..., dir)` (or LlamaForCausalLM's)
// and one trained with PEFT loads here. The GPT-2 layout is described below; Llama's
// (llama_peft_layout) names tensors base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight
// and the like, its targets PEFT's own module names.
//
// A PEFT adapter folder holds two files:
//   adapter_model.safetensors  the LoRA matrices, named base_model.model.transformer.<module>.lora_A.weight
//                              [r, in] and ...lora_B.weight [out, r] (the module's update is B·A)
//   adapter_config.json        r, lora_alpha, lora_dropout, target_modules, use_rslora, ...
// fusedtrain names the same tensors without the `base_model.model.transformer.` prefix, e.g.
// h.3.attn.c_attn.lora_A.weight. PEFT stores A and B the same way for GPT-2's Conv1D layers as for
// Linear ones (fan_in_fan_out only transposes the merged update), so no tensor is transposed.
//
// Targets. fusedtrain's names for the four projections of a block, and PEFT's target_modules
// entries for them (PEFT selects a module when its path ends with "." + entry):
//   qkv        h.{i}.attn.c_attn  "c_attn"
//   attn_proj  h.{i}.attn.c_proj  "attn.c_proj"
//   fc         h.{i}.mlp.c_fc     "c_fc"
//   mlp_proj   h.{i}.mlp.c_proj   "mlp.c_proj"
#pragma once
#include <map>
#include <string>
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// One adaptable projection of a model family: fusedtrain's target name, the module path under a
/// layer, and the target_modules entry save_peft_adapter writes for it.
struct PeftTarget {
  std::string name, module, peft;
};

/// How a model family's adapters sit in PEFT's files: the tensors' key prefix, the prefix of a
/// layer's module path before its index, the targets, and fan_in_fan_out (GPT-2's Conv1D layers
/// store [in, out]; PEFT stores A and B alike either way).
struct PeftLayout {
  std::string model;       ///< for messages: "GPT-2", "Llama"
  std::string key_prefix;  ///< "base_model.model.transformer.", "base_model.model."
  std::string layer_prefix;  ///< "h.", "model.layers."
  std::vector<PeftTarget> targets;
  bool fan_in_fan_out = false;
};

/// GPT2LMHeadModel's: the table above.
const PeftLayout& gpt2_peft_layout();
/// LlamaForCausalLM's: base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight and the
/// like, targets q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, named as PEFT names
/// them.
const PeftLayout& llama_peft_layout();

struct PeftLoraConfig {
  int64_t r = 0;         // the rank
  double alpha = 0;      // the update is scaled by alpha / r (alpha / sqrt(r) with rslora)
  double dropout = 0;    // on the adapter's input, in training
  std::vector<std::string> targets;  // fusedtrain target names (GPT-2: qkv, attn_proj, fc, mlp_proj)
  bool rslora = false;
  std::string base_model;  // base_model_name_or_path, e.g. "gpt2"; may be empty
};

struct PeftAdapter {
  PeftLoraConfig config;
  std::map<std::string, Tensor> tensors;  // fusedtrain names, on the CPU, in the file's dtype
};

/// Writes `lora_tensors` (fusedtrain names, any device and float dtype; saved as f32) and `config`
/// into the PEFT adapter folder `dir`, created if needed. Each file is replaced atomically. The
/// tensors must be A/B pairs of modules among config.targets with A [r, in] and B [out, r];
/// anything else, or a config with r <= 0, an unknown target, a non-finite alpha or a dropout
/// outside [0, 1), is an ft::Error naming the problem.
void save_peft_adapter(const std::string& dir, const std::map<std::string, Tensor>& lora_tensors,
                       const PeftLoraConfig& config, const PeftLayout& layout = gpt2_peft_layout());

/// Reads the PEFT adapter folder `dir`. config.targets come back in the order of the table above,
/// whatever the file's order; a bare "c_proj" entry selects both attn_proj and mlp_proj. A missing
/// file, peft_type other than LORA, r <= 0, a target_modules entry that selects none of the four
/// projections, rank_pattern or alpha_pattern entries (per-module ranks), a tensor name outside
/// the prefix and the four projections, an A without its B (or a B without its A), or a shape
/// that does not match r is an ft::Error naming the file and the problem.
PeftAdapter load_peft_adapter(const std::string& dir, const PeftLayout& layout = gpt2_peft_layout());

}  // namespace ft
