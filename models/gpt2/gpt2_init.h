// ft-gpt2's --init-from: a GPT's starting weights from an ft-gpt2 checkpoint or a Hugging Face
// GPT-2 model.safetensors (models/gpt2/hf_gpt2.h tells them apart and converts HF's).
#pragma once
#include <string>

#include "models/gpt2/gpt.h"

namespace ft {

/// Loads `path` (a .safetensors file, or a folder holding model.safetensors: a checkpoint's
/// step_N folder or an HF model folder) into `model`, strictly: every parameter of the model is
/// loaded and nothing is left over (an ft-gpt2 checkpoint's LoRA adapters excepted, which a model
/// without adapters skips). Returns "checkpoint" or "hugging face", for the start-up line.
std::string init_gpt2_from(GPT& model, const std::string& path);

}  // namespace ft
