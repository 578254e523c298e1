#include "models/gpt2/hf_gpt2.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <vector>

#include "lib/error.h"
#include "train/io/atomic_file.h"
#include "train/io/json.h"
#include "train/io/safetensors.h"

namespace ft {

namespace {

const std::string kPrefix = "transformer.";
constexpr int64_t kHeadSize = 64;        // every GPT-2 size's head width
constexpr int64_t kGpt2Vocab = 50257;    // GPT-2's tokenizer
constexpr int64_t kPaddedVocab = 50304;  // llm.c's padding of it to a multiple of 128

std::string without_prefix(const std::string& key) {
  return key.compare(0, kPrefix.size(), kPrefix) == 0 ? key.substr(kPrefix.size()) : key;
}

// The tensor named `name` in `hf`, with or without the prefix, or nullptr.
const Tensor* find_hf(const std::map<std::string, Tensor>& hf, const std::string& name) {
  for (const std::string& key : {name, kPrefix + name}) {
    auto it = hf.find(key);
    if (it != hf.end()) return &it->second;
  }
  return nullptr;
}

// i for a (prefix-stripped) name "h.<i>.<rest>"; nothing for other names, and for indices written
// with leading zeros or out of range, which no GPT-2 file has.
std::optional<int64_t> block_index(const std::string& name) {
  if (name.compare(0, 2, "h.") != 0) return std::nullopt;
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos || dot == 2 || (name[2] == '0' && dot > 3)) return std::nullopt;
  int64_t index = 0;
  const auto [end, ec] = std::from_chars(name.data() + 2, name.data() + dot, index);
  if (ec != std::errc() || end != name.data() + dot || index >= 100000) return std::nullopt;
  return index;
}

// A tensor of GPT-2 as HF stores it; `conv1d` weights are stored [in, out] and transposed.
struct HfTensor {
  std::string name;
  Shape shape;
  bool conv1d = false;
};

// Every HF tensor GPT(config) takes but wte.weight, whose row count may be below config.vocab.
std::vector<HfTensor> hf_layout(const GPTConfig& config) {
  const int64_t c = config.channels;
  std::vector<HfTensor> out{{"wpe.weight", {config.block_size, c}}};
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    std::vector<HfTensor> block{
        {h + "ln_1.weight", {c}},          {h + "ln_1.bias", {c}},
        {h + "attn.c_attn.weight", {c, 3 * c}, true}, {h + "attn.c_attn.bias", {3 * c}},
        {h + "attn.c_proj.weight", {c, c}, true},     {h + "attn.c_proj.bias", {c}},
        {h + "ln_2.weight", {c}},          {h + "ln_2.bias", {c}},
        {h + "mlp.c_fc.weight", {c, 4 * c}, true},    {h + "mlp.c_fc.bias", {4 * c}},
        {h + "mlp.c_proj.weight", {4 * c, c}, true},  {h + "mlp.c_proj.bias", {c}},
    };
    out.insert(out.end(), block.begin(), block.end());
  }
  out.push_back({"ln_f.weight", {c}});
  out.push_back({"ln_f.bias", {c}});
  return out;
}

}  // namespace

bool is_hf_gpt2(const std::map<std::string, Tensor>& tensors) {
  const Tensor* qkv = find_hf(tensors, "h.0.attn.c_attn.weight");
  return qkv && qkv->dim() == 2 && qkv->size(0) * 3 == qkv->size(1);
}

GPTConfig hf_gpt2_config(const std::map<std::string, Tensor>& hf, int64_t vocab) {
  const Tensor* wte = find_hf(hf, "wte.weight");
  const Tensor* wpe = find_hf(hf, "wpe.weight");
  FT_CHECK(wte && wte->dim() == 2, "hf_gpt2_config: no 2-D wte.weight (the token embedding) among the ", hf.size(),
           " tensors");
  const int64_t channels = wte->size(1), rows = wte->size(0);
  FT_CHECK(channels > 0 && channels % kHeadSize == 0, "hf_gpt2_config: wte.weight ", shape_str(wte->shape()),
           " has ", channels, " channels, not a multiple of GPT-2's head size ", kHeadSize);
  FT_CHECK(wpe && wpe->dim() == 2 && wpe->size(1) == channels, "hf_gpt2_config: wpe.weight (the position "
           "embedding) must be [block_size, ", channels, "], got ", wpe ? shape_str(wpe->shape()) : "nothing");
  int64_t layers = 0;
  for (const auto& [key, t] : hf)
    if (auto index = block_index(without_prefix(key))) layers = std::max(layers, *index + 1);
  FT_CHECK(layers > 0, "hf_gpt2_config: no h.{i} blocks among the ", hf.size(), " tensors");
  FT_CHECK(vocab >= 0, "hf_gpt2_config: vocab must be >= 0 (0: from wte.weight), got ", vocab);
  if (vocab == 0) vocab = rows == kGpt2Vocab ? kPaddedVocab : rows;
  FT_CHECK(vocab >= rows, "hf_gpt2_config: vocab ", vocab, " is below wte.weight's ", rows, " rows");
  return GPTConfig{.vocab = vocab,
                   .block_size = wpe->size(0),
                   .layers = layers,
                   .heads = channels / kHeadSize,
                   .channels = channels};
}

std::map<std::string, Tensor> gpt2_state_from_hf(const std::map<std::string, Tensor>& hf, const GPTConfig& config) {
  // Keyed by the prefix-stripped name; `key` keeps the name in `hf` for the error message.
  struct Entry {
    std::string key;
    Tensor tensor;
  };
  std::map<std::string, Entry> left;
  LoadReport problems;
  for (const auto& [key, t] : hf)
    if (!left.emplace(without_prefix(key), Entry{key, t}).second)
      problems.unexpected.push_back(key + " (also present without the prefix)");

  std::map<std::string, Tensor> out;
  for (const HfTensor& expected : hf_layout(config)) {
    auto it = left.find(expected.name);
    if (it == left.end()) {
      problems.missing.push_back(expected.name);
      continue;
    }
    const Tensor t = it->second.tensor.detach();
    if (t.shape() != expected.shape)
      problems.mismatched.push_back(it->second.key + ": got " + shape_str(t.shape()) + ", expected " +
                                    shape_str(expected.shape));
    else
      out[expected.name] = expected.conv1d ? t.transpose() : t;
    left.erase(it);
  }

  auto wte = left.find("wte.weight");
  if (wte == left.end()) {
    problems.missing.push_back("wte.weight");
  } else {
    const Tensor t = wte->second.tensor.detach();
    if (t.dim() != 2 || t.size(1) != config.channels) {
      problems.mismatched.push_back(wte->second.key + ": got " + shape_str(t.shape()) + ", expected [<= " +
                                    std::to_string(config.vocab) + ", " + std::to_string(config.channels) + "]");
    } else if (t.size(0) > config.vocab) {
      problems.mismatched.push_back(wte->second.key + ": " + std::to_string(t.size(0)) +
                                    " rows, more than the config's vocab " + std::to_string(config.vocab));
    } else if (t.size(0) == config.vocab) {
      out["wte.weight"] = t;
    } else {
      // Zero rows, as llm.c pads: no token id of the tokenizer selects them.
      Tensor padded = Tensor::zeros({config.vocab, config.channels}, t.dtype(), t.device());
      padded.narrow(0, 0, t.size(0)).copy_(t);
      out["wte.weight"] = padded;
    }
    left.erase(wte);
  }

  // The causal mask buffers (fusedtrain's attention is causal by construction) and the LM head,
  // which GPT-2 ties to wte.
  left.erase("lm_head.weight");
  for (int64_t l = 0; l < config.layers; ++l)
    for (const char* buffer : {".attn.bias", ".attn.masked_bias"}) left.erase("h." + std::to_string(l) + buffer);
  for (const auto& [name, entry] : left) problems.unexpected.push_back(entry.key);

  for (auto* names : {&problems.missing, &problems.unexpected, &problems.mismatched})
    std::sort(names->begin(), names->end());
  // The likeliest mistake, passing an ft-gpt2 checkpoint, gets said outright.
  const bool fusedtrain_layout = !problems.ok() && !is_hf_gpt2(hf) && find_hf(hf, "h.0.attn.c_attn.weight");
  FT_CHECK(problems.ok(), "gpt2_state_from_hf: the Hugging Face GPT-2 state does not fit GPTConfig{vocab ",
           config.vocab, ", block_size ", config.block_size, ", layers ", config.layers, ", channels ",
           config.channels, "}\n", problems.str(),
           fusedtrain_layout ? "\nh.0.attn.c_attn.weight is [3C, C]: this is a fusedtrain state dict, which "
                               "load_state_dict takes as it is" : "");
  return out;
}

std::map<std::string, Tensor> hf_gpt2_state(const GPT& model, DType dtype) {
  FT_CHECK(model.lora_state_dict().empty(), "hf_gpt2_state: the model has LoRA adapters, which PEFT's files hold ",
           "(save_peft_adapter); a Hugging Face GPT-2 folder holds a plain model");
  const std::map<std::string, Tensor> state = model.state_dict();
  std::map<std::string, Tensor> hf;
  for (const HfTensor& t : hf_layout(model.config())) {
    const Tensor& ours = state.at(t.name);
    const Tensor cpu = (ours.dtype() == dtype ? ours : ours.to(dtype)).to(kCPU);
    hf.emplace(kPrefix + t.name, t.conv1d ? cpu.transpose() : cpu);
  }
  const Tensor& wte = state.at("wte.weight");
  hf.emplace(kPrefix + "wte.weight", (wte.dtype() == dtype ? wte : wte.to(dtype)).to(kCPU));
  return hf;
}

std::string hf_gpt2_config_json(const GPTConfig& c, DType dtype) {
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"architectures", "[\"GPT2LMHeadModel\"]"},
      {"model_type", "\"gpt2\""},
      {"vocab_size", std::to_string(c.vocab)},
      {"n_positions", std::to_string(c.block_size)},
      {"n_embd", std::to_string(c.channels)},
      {"n_layer", std::to_string(c.layers)},
      {"n_head", std::to_string(c.heads)},
      {"activation_function", "\"gelu_new\""},
      {"layer_norm_epsilon", "1e-05"},
      {"resid_pdrop", "0.0"},
      {"embd_pdrop", "0.0"},
      {"attn_pdrop", "0.0"},
      {"tie_word_embeddings", "true"},
      {"torch_dtype", dtype == DType::BF16 ? "\"bfloat16\"" : "\"float32\""}};
  std::string text = "{\n";
  for (size_t i = 0; i < fields.size(); ++i)
    text += "  " + json_quote(fields[i].first) + ": " + fields[i].second + (i + 1 < fields.size() ? ",\n" : "\n");
  return text + "}\n";
}

void save_hf_gpt2(const GPT& model, const std::string& folder, DType dtype) {
  FT_CHECK(dtype == DType::F32 || dtype == DType::BF16, "save_hf_gpt2: weights are written in f32 or bf16, not ",
           dtype_name(dtype));
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  FT_CHECK(!ec, "save_hf_gpt2: cannot create '", folder, "': ", ec.message());
  save_safetensors((std::filesystem::path(folder) / "model.safetensors").string(), hf_gpt2_state(model, dtype),
                   {{"format", "pt"}});
  write_file_atomically((std::filesystem::path(folder) / "config.json").string(),
                        hf_gpt2_config_json(model.config(), dtype), "save_hf_gpt2");
}

}  // namespace ft
