// ft-gpt2's two model families behind one face (models/causal_lm.h): which one a run trains
// (--arch, or the model_type of --init-from's config.json), its sizes (a --model preset, or that
// config.json), building it, starting it from --init-from's weights, and its files (the PEFT
// adapter layout, the Hugging Face export).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/gpt2/gpt.h"
#include "models/llama/llama.h"
#include "train/io/peft_adapter.h"

namespace ft::gpt2 {

/// The model a run trains, before it is built.
struct ModelChoice {
  std::string arch;    ///< "gpt2" or "llama"
  std::string preset;  ///< the --model name, or empty when --init-from's config.json sizes it
  GPTConfig gpt;       ///< with arch gpt2
  LlamaConfig llama;   ///< with arch llama
  /// Sizes and parameter count, from the config alone.
  CausalLMShape shape() const;
};

/// --arch as given (gpt2 or llama), else the family of --init-from's config.json (model_type gpt2,
/// or llama and mistral), else gpt2. A model_type of another family is an ft::Error naming it.
std::string arch_of(const std::string& arch_flag, const std::string& init_from);

/// The --model presets of an arch, for --help and errors.
std::string preset_names(const std::string& arch);

/// Whether --init-from's config.json sizes the model (a Llama from a Hugging Face folder).
bool sized_by_folder(const std::string& arch, const std::string& init_from);

/// The sizes: a Llama started from a Hugging Face folder takes its config.json (vocab must then be
/// 0 or its own); otherwise the arch's --model preset (empty: d12 or 1b) with `vocab` rows.
ModelChoice choose_model(const std::string& arch, const std::string& preset, const std::string& init_from,
                         int64_t vocab);

/// The family's linears that LoRA can wrap (--lora-targets), in layer order.
std::vector<std::string> lora_names(const std::string& arch);

std::unique_ptr<CausalLM> make_model(const ModelChoice& choice, uint64_t seed);

/// Loads --init-from's weights into the model (an ft-gpt2 checkpoint or a Hugging Face GPT-2; a
/// Hugging Face Llama folder); returns what was read, for the start-up line.
std::string init_from(CausalLM& model, const std::string& path);

/// How the family's adapters are named in PEFT's files.
const PeftLayout& peft_layout(const CausalLM& model);

/// Writes the model as a Hugging Face folder (config.json and model.safetensors in `dtype`) that
/// LlamaForCausalLM or GPT2LMHeadModel.from_pretrained loads; a model with adapters is refused.
void export_hf(const CausalLM& model, const std::string& folder, DType dtype);

}  // namespace ft::gpt2
