// Hugging Face Llama folders in and out: config.json with model.safetensors, or with the shards
// model-0000k-of-0000n.safetensors that model.safetensors.index.json maps, in bf16 or f32, as
// LlamaForCausalLM.save_pretrained writes them and from_pretrained reads them. The tensor names
// are the model's own (models/llama/llama.h). A tied model's files may carry lm_head.weight (a
// copy of the embedding); it is not read, and not written.
#pragma once
#include <map>
#include <string>

#include "models/llama/llama.h"

namespace ft {

/// The LlamaConfig of a config.json (a folder holding one, or the file), with transformers'
/// defaults for absent fields. A model type other than "llama" or "mistral" (same tensors, no
/// sliding window), an activation other than silu, attention or MLP biases, a rope_scaling other
/// than Llama 3's, or a size that does not fit is an ft::Error naming the file and the field.
LlamaConfig read_hf_llama_config(const std::string& path);

/// config.json text for `config` that LlamaForCausalLM reads (model_type llama), its weights in
/// `dtype` (torch_dtype).
std::string hf_llama_config_json(const LlamaConfig& config, DType dtype);

/// Every tensor of an HF folder's weights, on the CPU: model.safetensors, or the shard files of
/// model.safetensors.index.json's weight_map (each file read once; a name it maps to a file that
/// lacks it, or a file it does not name, is an ft::Error).
std::map<std::string, Tensor> load_hf_weights(const std::string& folder);

/// Loads an HF folder's weights into `model` by name, converting dtypes: every parameter must be
/// there with its shape, and nothing else but a tied model's lm_head.weight. Problems are one
/// ft::Error listing each by name.
void load_hf_llama(Llama& model, const std::string& folder);

/// Writes `model` as an HF folder: config.json and model.safetensors (weights in `dtype`), each
/// file atomically, the folder created if missing.
void save_hf_llama(const Llama& model, const std::string& folder, DType dtype);

}  // namespace ft
