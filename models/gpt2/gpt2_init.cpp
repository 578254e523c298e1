#include "models/gpt2/gpt2_init.h"

#include <filesystem>

#include "lib/error.h"
#include "models/gpt2/hf_gpt2.h"
#include "train/io/safetensors.h"

namespace ft {

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
  }
  model.load_state_dict(tensors, /*strict=*/true);
  return hf ? "hugging face" : "checkpoint";
}

}  // namespace ft
