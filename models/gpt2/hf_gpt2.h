// Hugging Face GPT-2 weights (the `model.safetensors` of gpt2, gpt2-medium, ...) as fusedtrain
// GPT state dicts, for fine-tuning a pretrained model.
//
// HF names the tensors as fusedtrain does (wte.weight, h.{i}.attn.c_attn.weight, ln_f.bias, ...),
// optionally under a `transformer.` prefix (files saved from GPT2LMHeadModel), but its four
// projections are Conv1D layers that store the weight as [in, out], where fusedtrain's Linear
// stores [out, in]. It also saves two causal-mask buffers per block and, from GPT2LMHeadModel,
// lm_head.weight, which is tied to wte.weight; fusedtrain has neither.
//
// Telling the two files apart: an ft-gpt2 checkpoint's model.safetensors (save_checkpoint) holds
// GPT::state_dict() under the same plain names, so names alone cannot decide. The shape of the
// first QKV weight can: fusedtrain's h.0.attn.c_attn.weight is [3C, C], HF's is [C, 3C].
#pragma once
#include <map>
#include <string>

#include "models/gpt2/gpt.h"

namespace ft {

/// True when `tensors` hold h.0.attn.c_attn.weight (or transformer.h.0.attn.c_attn.weight) in
/// HF's Conv1D layout [C, 3C]; false for a fusedtrain state dict ([3C, C]) and anything else.
bool is_hf_gpt2(const std::map<std::string, Tensor>& tensors);

/// The GPTConfig of an HF GPT-2 state: layers counts the h.{i} blocks, channels is wte's width,
/// block_size is wpe's rows, and heads = channels / 64, because every GPT-2 size (124M to 1.5B)
/// uses 64-wide heads and the file does not record the head count. vocab is the argument when it
/// is > 0; 0 means 50304 for GPT-2's 50257-token vocabulary (llm.c's padding to a multiple of 128,
/// which the matmuls prefer) and wte's row count otherwise. A missing or malformed wte or wpe,
/// channels not a multiple of 64, or a vocab below wte's rows is an ft::Error.
GPTConfig hf_gpt2_config(const std::map<std::string, Tensor>& hf, int64_t vocab = 0);

/// Converts an HF GPT-2 state into the state dict of GPT(config): strips the optional
/// `transformer.` prefix, transposes the four Conv1D weights into new contiguous [out, in]
/// tensors, pads wte.weight with zero rows up to config.vocab, and drops h.{i}.attn.bias,
/// h.{i}.attn.masked_bias and lm_head.weight. Other tensors are shared, not copied. dtypes are
/// kept (load_state_dict converts). A missing, unknown or mis-shaped tensor, or more wte rows than
/// config.vocab, is one ft::Error listing every problem by its name in `hf`.
std::map<std::string, Tensor> gpt2_state_from_hf(const std::map<std::string, Tensor>& hf, const GPTConfig& config);

/// The other way: `model`'s weights as GPT2LMHeadModel.save_pretrained names and lays them out
/// (`transformer.` prefix, the four projections' weights transposed to [in, out]), in `dtype`,
/// on the CPU; every wte row (the model's vocabulary, padding included). A model with LoRA
/// adapters is an ft::Error (their files are PEFT's).
std::map<std::string, Tensor> hf_gpt2_state(const GPT& model, DType dtype);
/// config.json text for `config` that GPT2LMHeadModel reads (GELU's tanh form, LayerNorm eps
/// 1e-5, no dropout, the head tied to wte), its weights in `dtype` (torch_dtype).
std::string hf_gpt2_config_json(const GPTConfig& config, DType dtype);
/// Writes `model` as a Hugging Face folder: config.json and model.safetensors, each file
/// atomically, the folder created if missing.
void save_hf_gpt2(const GPT& model, const std::string& folder, DType dtype);

}  // namespace ft
