#include "examples/gpt2/model_family.h"

#include <filesystem>

#include "lib/error.h"
#include "models/gpt2/gpt2_init.h"
#include "models/gpt2/hf_gpt2.h"
#include "models/llama/hf_llama.h"
#include "train/io/json.h"
#include "train/io/text_file.h"

namespace ft::gpt2 {

namespace {

GPTConfig gpt_preset(const std::string& name, int64_t vocab) {
  if (name == "tiny") return {.vocab = vocab, .block_size = 256, .layers = 2, .heads = 4, .channels = 64};
  if (name == "d6") return {.vocab = vocab, .block_size = 1024, .layers = 6, .heads = 6, .channels = 384};
  // llm.c's sizes of the GPT-2 family: 124M, 350M, 774M and 1.5B parameters (at vocab 50304).
  if (name == "d12") return {.vocab = vocab, .block_size = 1024, .layers = 12, .heads = 12, .channels = 768};
  if (name == "d24") return {.vocab = vocab, .block_size = 1024, .layers = 24, .heads = 16, .channels = 1024};
  if (name == "d36") return {.vocab = vocab, .block_size = 1024, .layers = 36, .heads = 20, .channels = 1280};
  if (name == "d48") return {.vocab = vocab, .block_size = 1024, .layers = 48, .heads = 25, .channels = 1600};
  FT_FAIL("ft-gpt2: unknown --model '", name, "' for --arch gpt2: expected ", preset_names("gpt2"));
}

LlamaConfig llama_preset(const std::string& name, int64_t vocab) {
  if (name == "tiny")
    return {.vocab = vocab, .hidden = 64, .intermediate = 176, .layers = 2, .heads = 4, .kv_heads = 2,
            .max_positions = 256, .rms_eps = 1e-5, .rope = {.theta = 10000.0}};
  if (name == "1b") return LlamaConfig::llama_3_2_1b(vocab);
  if (name == "8b") return LlamaConfig::llama_3_1_8b(vocab);
  FT_FAIL("ft-gpt2: unknown --model '", name, "' for --arch llama: expected ", preset_names("llama"));
}

/// The config.json beside (or at) `path`, if there is one.
std::string config_json_of(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return "";
  const fs::path p(path);
  if (fs::is_directory(p) && fs::exists(p / "config.json")) return (p / "config.json").string();
  if (p.filename() == "config.json" && fs::exists(p)) return p.string();
  return "";
}

}  // namespace

CausalLMShape ModelChoice::shape() const { return arch == "llama" ? Llama::shape_of(llama) : GPT::shape_of(gpt); }

std::string arch_of(const std::string& arch_flag, const std::string& init_from) {
  if (!arch_flag.empty()) {
    FT_CHECK(arch_flag == "gpt2" || arch_flag == "llama", "ft-gpt2: --arch must be gpt2 or llama, got '", arch_flag, "'");
    return arch_flag;
  }
  const std::string config = config_json_of(init_from);
  if (config.empty()) return "gpt2";
  const JsonValue root = parse_json(read_text_file(config, "ft-gpt2: --init-from"), "ft-gpt2: " + config);
  const JsonValue* model_type = root.find("model_type");
  const std::string type = model_type && model_type->kind == JsonValue::Kind::String ? model_type->text : "";
  if (type == "gpt2") return "gpt2";
  if (type == "llama" || type == "mistral") return "llama";
  FT_FAIL("ft-gpt2: --init-from ", config, " holds a model of type '", type,
          "', which ft-gpt2 does not train (gpt2, llama and mistral are supported)");
}

std::string preset_names(const std::string& arch) {
  return arch == "llama" ? "tiny (L2 C64, 4 heads, 2 KV heads), 1b (Llama-3.2-1B: L16 C2048, 32 heads, 8 KV heads, "
                           "MLP 8192, tied) or 8b (Llama-3.1-8B: L32 C4096, 32 heads, 8 KV heads, MLP 14336, untied)"
                         : "tiny (L2 C64), d6 (L6 C384), d12 (GPT-2 small, L12 C768), d24 (L24 C1024), d36 (L36 "
                           "C1280) or d48 (GPT-2 XL, L48 C1600, 1.5B)";
}

bool sized_by_folder(const std::string& arch, const std::string& init_from) {
  return arch == "llama" && !config_json_of(init_from).empty();
}

ModelChoice choose_model(const std::string& arch, const std::string& preset, const std::string& init_from,
                         int64_t vocab) {
  ModelChoice c{.arch = arch, .preset = preset.empty() ? (arch == "llama" ? "1b" : "d12") : preset};
  if (sized_by_folder(arch, init_from)) {
    c.preset.clear();
    c.llama = read_hf_llama_config(init_from);
    FT_CHECK(vocab == 0 || vocab == c.llama.vocab, "ft-gpt2: --vocab ", vocab, " differs from the ", c.llama.vocab,
             " rows of --init-from's model (leave --vocab out)");
    return c;
  }
  FT_CHECK(vocab > 0, "ft-gpt2: the vocabulary must be positive, got ", vocab);
  if (arch == "llama") {
    c.llama = llama_preset(c.preset, vocab);
    c.llama.check();
  } else {
    c.gpt = gpt_preset(c.preset, vocab);
  }
  return c;
}

std::vector<std::string> lora_names(const std::string& arch) {
  if (arch == "llama") return Llama::lora_targets();
  std::vector<std::string> names;
  for (const auto& [name, path] : GPT::lora_targets()) names.push_back(name);
  return names;
}

std::unique_ptr<CausalLM> make_model(const ModelChoice& choice, uint64_t seed) {
  if (choice.arch == "llama") return std::make_unique<Llama>(choice.llama, seed);
  return std::make_unique<GPT>(choice.gpt, seed);
}

std::string init_from(CausalLM& model, const std::string& path) {
  if (auto* llama = dynamic_cast<Llama*>(&model)) {
    FT_CHECK(!config_json_of(path).empty(), "ft-gpt2: --init-from '", path, "': a Llama starts from a Hugging Face ",
             "folder (config.json with model.safetensors or its shards); an ft-gpt2 checkpoint continues with --resume");
    load_hf_llama(*llama, path);
    return "hugging face";
  }
  return init_gpt2_from(dynamic_cast<GPT&>(model), path);
}

const PeftLayout& peft_layout(const CausalLM& model) {
  return dynamic_cast<const Llama*>(&model) ? llama_peft_layout() : gpt2_peft_layout();
}

void export_hf(const CausalLM& model, const std::string& folder, DType dtype) {
  FT_CHECK(model.lora_state_dict().empty(), "ft-gpt2: --export-hf writes a whole model; a LoRA run's adapters are ",
           "saved in PEFT's layout with each checkpoint (--ckpt-dir)");
  if (const auto* llama = dynamic_cast<const Llama*>(&model))
    save_hf_llama(*llama, folder, dtype);
  else
    save_hf_gpt2(dynamic_cast<const GPT&>(model), folder, dtype);
}

}  // namespace ft::gpt2
