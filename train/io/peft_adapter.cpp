#include "train/io/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "lib/error.h"
#include "train/io/atomic_file.h"
#include "train/io/json.h"
#include "train/io/safetensors.h"
#include "train/io/text_file.h"

namespace ft {

namespace fs = std::filesystem;

namespace {

const char* const kConfigFile = "adapter_config.json";
const char* const kWeightsFile = "adapter_model.safetensors";

using Target = PeftTarget;

const Target* find_target(const PeftLayout& layout, const std::string& name) {
  for (const Target& t : layout.targets)
    if (name == t.name) return &t;
  return nullptr;
}

/// The layout's target names, for messages: "qkv, attn_proj, fc or mlp_proj".
std::string target_names(const PeftLayout& layout) {
  std::string names;
  for (size_t i = 0; i < layout.targets.size(); ++i)
    names += (i == 0 ? "" : i + 1 == layout.targets.size() ? " or " : ", ") + layout.targets[i].name;
  return names;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// PEFT's rule for a list entry, applied to the module path below h.{i}: the path is the entry or
// ends with "." + entry.
bool entry_selects(const std::string& entry, const Target& target) {
  const std::string& module = target.module;
  return module == entry || ends_with(module, "." + entry);
}

// The config's targets, checked and in table order.
std::vector<std::string> canonical_targets(const PeftLayout& layout, const std::vector<std::string>& targets,
                                           const std::string& where) {
  std::set<std::string> wanted;
  for (const std::string& name : targets) {
    FT_CHECK(find_target(layout, name), where, ": unknown LoRA target '", name, "' (expected ", target_names(layout),
             ")");
    wanted.insert(name);
  }
  std::vector<std::string> out;
  for (const Target& t : layout.targets)
    if (wanted.count(t.name)) out.push_back(t.name);
  return out;
}

// The target of a fusedtrain LoRA tensor name "<layer prefix><i>.<module>.lora_A.weight", setting
// `is_a` and `module_path` ("<layer prefix><i>.<module>"); nullptr when the name is not one.
const Target* lora_tensor_target(const PeftLayout& layout, const std::string& name, bool* is_a,
                                 std::string* module_path) {
  const std::string& layer = layout.layer_prefix;
  for (const bool a : {true, false}) {
    const std::string suffix = a ? ".lora_A.weight" : ".lora_B.weight";
    if (!ends_with(name, suffix)) continue;
    *is_a = a;
    *module_path = name.substr(0, name.size() - suffix.size());
    if (module_path->compare(0, layer.size(), layer) != 0) return nullptr;
    const size_t dot = module_path->find('.', layer.size());
    if (dot == std::string::npos || dot == layer.size() ||
        module_path->find_first_not_of("0123456789", layer.size()) != dot)
      return nullptr;
    for (const Target& t : layout.targets)
      if (module_path->compare(dot + 1, std::string::npos, t.module) == 0) return &t;
    return nullptr;
  }
  return nullptr;
}

// Checks that `tensors` (fusedtrain names) are A/B pairs of the config's targets with rank r.
// `where` starts each message: the function and, when loading, the file.
void check_lora_tensors(const PeftLayout& layout, const std::map<std::string, Tensor>& tensors,
                        const PeftLoraConfig& config, const std::string& where) {
  FT_CHECK(!tensors.empty(), where, ": no LoRA tensors");
  std::map<std::string, int> halves;  // module path -> 1 (A seen) | 2 (B seen)
  for (const auto& [name, t] : tensors) {
    bool is_a = false;
    std::string module;
    const Target* target = lora_tensor_target(layout, name, &is_a, &module);
    if (!target) {
      std::string modules;
      for (const Target& t : layout.targets) modules += (modules.empty() ? "" : "|") + t.module;
      FT_FAIL(where, ": tensor '", name, "' is not ", layout.layer_prefix, "{i}.<", modules,
              ">.lora_A.weight or .lora_B.weight");
    }
    FT_CHECK(std::find(config.targets.begin(), config.targets.end(), target->name) != config.targets.end(), where,
             ": tensor '", name, "' adapts ", target->name, ", which is not among the targets");
    check_defined(t, where.c_str(), name.c_str());
    const bool rank_fits = t.dim() == 2 && t.size(is_a ? 0 : 1) == config.r;
    FT_CHECK(rank_fits, where, ": tensor '", name, "' is ", shape_str(t.shape()), " but r = ", config.r,
             " needs ", is_a ? "[r, in]" : "[out, r]");
    halves[module] |= is_a ? 1 : 2;
  }
  for (const auto& [module, seen] : halves)
    FT_CHECK(seen == 3, where, ": '", module, seen == 1 ? ".lora_A.weight' has no lora_B.weight"
                                                        : ".lora_B.weight' has no lora_A.weight");
}

void check_config(const PeftLoraConfig& config, const std::string& where) {
  FT_CHECK(config.r > 0, where, ": r must be > 0, got ", config.r);
  FT_CHECK(std::isfinite(config.alpha), where, ": lora_alpha must be finite, got ", config.alpha);
  FT_CHECK(config.dropout >= 0 && config.dropout < 1, where, ": lora_dropout must be in [0, 1), got ",
           config.dropout);
  FT_CHECK(!config.targets.empty(), where, ": no LoRA targets");
}

std::string config_json(const PeftLayout& layout, const PeftLoraConfig& config) {
  std::string modules;
  for (const std::string& name : config.targets)
    modules += std::string(modules.empty() ? "" : ", ") + json_quote(find_target(layout, name)->peft);
  // PEFT's own layout: keys sorted, two-space indent. rank_pattern and alpha_pattern are PEFT's
  // per-module overrides, empty because every module has rank r.
  return std::string("{\n") +
         "  \"alpha_pattern\": {},\n" +
         "  \"base_model_name_or_path\": " + (config.base_model.empty() ? "null" : json_quote(config.base_model)) +
         ",\n" +
         "  \"bias\": \"none\",\n" +
         "  \"fan_in_fan_out\": " + (layout.fan_in_fan_out ? "true" : "false") + ",\n" +
         "  \"inference_mode\": false,\n" +
         "  \"lora_alpha\": " + json_number(config.alpha) + ",\n" +
         "  \"lora_dropout\": " + json_number(config.dropout) + ",\n" +
         "  \"peft_type\": \"LORA\",\n" +
         "  \"r\": " + std::to_string(config.r) + ",\n" +
         "  \"rank_pattern\": {},\n" +
         "  \"target_modules\": [" + modules + "],\n" +
         "  \"task_type\": \"CAUSAL_LM\",\n" +
         "  \"use_rslora\": " + (config.rslora ? "true" : "false") + "\n" +
         "}\n";
}

PeftLoraConfig parse_config(const PeftLayout& layout, const fs::path& path) {
  const std::string where = "load_peft_adapter: '" + path.string() + "'";
  const JsonValue root = parse_json(read_text_file(path.string(), where), where + ": bad JSON");
  FT_CHECK(root.kind == JsonValue::Kind::Object, where, ": not a JSON object");
  using Kind = JsonValue::Kind;
  auto field = [&](const char* key, Kind kind, const char* what) -> const JsonValue& {
    const JsonValue* v = root.find(key);
    FT_CHECK(v, where, ": no \"", key, "\"");
    FT_CHECK(v->kind == kind || (kind == Kind::Number && v->is_number()), where, ": \"", key, "\" must be ", what);
    return *v;
  };

  const std::string& peft_type = field("peft_type", Kind::String, "a string").text;
  FT_CHECK(peft_type == "LORA", where, ": peft_type is \"", peft_type, "\", not \"LORA\"");
  PeftLoraConfig config;
  config.r = field("r", Kind::Integer, "an integer").integer;
  config.alpha = field("lora_alpha", Kind::Number, "a number").number;
  config.dropout = root.find("lora_dropout") ? field("lora_dropout", Kind::Number, "a number").number : 0.0;
  if (root.find("use_rslora")) config.rslora = field("use_rslora", Kind::Bool, "true or false").boolean;
  if (const JsonValue* base = root.find("base_model_name_or_path"); base && base->kind != Kind::Null)
    config.base_model = field("base_model_name_or_path", Kind::String, "a string or null").text;
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    const JsonValue* v = root.find(pattern);
    FT_CHECK(!v || v->kind == Kind::Null || (v->kind == Kind::Object && v->members.empty()), where, ": \"",
             pattern, "\" sets per-module ranks or alphas, which fusedtrain does not support");
  }

  std::set<std::string> targets;
  for (const JsonValue& entry : field("target_modules", Kind::Array, "a list of module names").items) {
    FT_CHECK(entry.kind == Kind::String, where, ": target_modules entries must be strings");
    bool selected = false;
    for (const Target& t : layout.targets)
      if (entry_selects(entry.text, t)) {
        targets.insert(t.name);
        selected = true;
      }
    std::string modules;
    for (const Target& t : layout.targets) modules += (modules.empty() ? "" : ", ") + t.module;
    FT_CHECK(selected, where, ": target_modules entry \"", entry.text, "\" selects none of ", layout.model, "'s ",
             modules);
  }
  config.targets = canonical_targets(layout, {targets.begin(), targets.end()}, where);
  check_config(config, where);
  return config;
}

}  // namespace

const PeftLayout& gpt2_peft_layout() {
  static const PeftLayout layout{"GPT-2", "base_model.model.transformer.", "h.",
                                 {{"qkv", "attn.c_attn", "c_attn"},
                                  {"attn_proj", "attn.c_proj", "attn.c_proj"},
                                  {"fc", "mlp.c_fc", "c_fc"},
                                  {"mlp_proj", "mlp.c_proj", "mlp.c_proj"}},
                                 /*fan_in_fan_out=*/true};
  return layout;
}

const PeftLayout& llama_peft_layout() {
  static const PeftLayout layout{"Llama", "base_model.model.", "model.layers.",
                                 {{"q_proj", "self_attn.q_proj", "q_proj"},
                                  {"k_proj", "self_attn.k_proj", "k_proj"},
                                  {"v_proj", "self_attn.v_proj", "v_proj"},
                                  {"o_proj", "self_attn.o_proj", "o_proj"},
                                  {"gate_proj", "mlp.gate_proj", "gate_proj"},
                                  {"up_proj", "mlp.up_proj", "up_proj"},
                                  {"down_proj", "mlp.down_proj", "down_proj"}},
                                 /*fan_in_fan_out=*/false};
  return layout;
}

void save_peft_adapter(const std::string& dir, const std::map<std::string, Tensor>& lora_tensors,
                       const PeftLoraConfig& config, const PeftLayout& layout) {
  const std::string where = "save_peft_adapter: '" + dir + "'";
  PeftLoraConfig checked = config;
  checked.targets = canonical_targets(layout, config.targets, where);
  FT_CHECK(checked.targets.size() == config.targets.size(), where, ": a LoRA target is listed twice");
  check_config(checked, where);
  check_lora_tensors(layout, lora_tensors, checked, where);

  std::error_code ec;
  fs::create_directories(dir, ec);
  FT_CHECK(!ec, where, ": cannot create the folder: ", ec.message());
  std::map<std::string, Tensor> weights;
  for (const auto& [name, t] : lora_tensors) weights[layout.key_prefix + name] = t.detach().to(kCPU).to(DType::F32);
  // {"format": "pt"} is the metadata PEFT and transformers write and expect.
  save_safetensors((fs::path(dir) / kWeightsFile).string(), weights, {{"format", "pt"}});
  write_file_atomically((fs::path(dir) / kConfigFile).string(), config_json(layout, checked), "save_peft_adapter");
}

PeftAdapter load_peft_adapter(const std::string& dir, const PeftLayout& layout) {
  const fs::path config_path = fs::path(dir) / kConfigFile, weights_path = fs::path(dir) / kWeightsFile;
  for (const fs::path& path : {config_path, weights_path})
    FT_CHECK(fs::is_regular_file(path), "load_peft_adapter: '", path.string(), "' does not exist (a PEFT adapter "
             "folder holds ", kConfigFile, " and ", kWeightsFile, ")");
  PeftAdapter adapter;
  adapter.config = parse_config(layout, config_path);
  const std::string where = "load_peft_adapter: '" + weights_path.string() + "'";
  for (auto& [key, t] : load_safetensors(weights_path.string()).tensors) {
    const std::string& prefix = layout.key_prefix;
    FT_CHECK(key.compare(0, prefix.size(), prefix) == 0, where, ": tensor '", key, "' does not start with '", prefix,
             "'");
    adapter.tensors.emplace(key.substr(prefix.size()), t);
  }
  check_lora_tensors(layout, adapter.tensors, adapter.config, where);
  return adapter;
}

}  // namespace ft
