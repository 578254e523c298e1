#include "models/gpt2/gpt2_init.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "lib/error.h"
#include "models/gpt2/hf_gpt2.h"
#include "train/io/safetensors.h"

namespace ft {

namespace {

// "L=2 C=64 V=256 (block 256)": the sizes of a GPT-2 state in ft-gpt2's names, read off its
// embeddings and its blocks' names; empty when it has no token embedding.
std::string state_sizes(const std::map<std::string, Tensor>& tensors) {
  auto wte = tensors.find("wte.weight"), wpe = tensors.find("wpe.weight");
  if (wte == tensors.end() || wte->second.dim() != 2) return "";
  int64_t layers = 0;
  for (const auto& [name, t] : tensors)
    if (name.rfind("h.", 0) == 0) layers = std::max<int64_t>(layers, std::stoll(name.substr(2)) + 1);
  return "L=" + std::to_string(layers) + " C=" + std::to_string(wte->second.size(1)) + " V=" +
         std::to_string(wte->second.size(0)) +
         (wpe != tensors.end() ? " (block " + std::to_string(wpe->second.size(0)) + ")" : "");
}

std::string config_sizes(const GPTConfig& c) {
  return "L=" + std::to_string(c.layers) + " C=" + std::to_string(c.channels) + " V=" + std::to_string(c.vocab) +
         " (block " + std::to_string(c.block_size) + ")";
}

}  // namespace

std::string init_gpt2_from(GPT& model, const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  if (fs::is_directory(file)) file /= "model.safetensors";
  FT_CHECK(fs::is_regular_file(file), "--init-from: '", file.string(), "' is not a file (give a .safetensors file, ",
           "or a folder holding model.safetensors)");
  std::map<std::string, Tensor> tensors = load_safetensors(file.string()).tensors;
  const bool hf = is_hf_gpt2(tensors);
  if (hf) {
    tensors = gpt2_state_from_hf(tensors, model.config());
  } else {
    // A LoRA run's checkpoint: its adapters belong to that run, not to the base model.
    for (auto it = tensors.begin(); it != tensors.end();)
      it = it->first.find(".lora_") != std::string::npos ? tensors.erase(it) : std::next(it);
    const std::string theirs = state_sizes(tensors), ours = config_sizes(model.config());
    FT_CHECK(theirs.empty() || theirs == ours, "--init-from: '", file.string(), "' holds a GPT-2 of ", theirs,
             "; this run builds ", ours, ": give the --model preset and --vocab of the checkpoint");
  }
  model.load_state_dict(tensors, /*strict=*/true);
  return hf ? "hugging face" : "checkpoint";
}

}  // namespace ft
