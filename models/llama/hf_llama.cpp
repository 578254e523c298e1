#include "models/llama/hf_llama.h"

#include <filesystem>
#include <set>

#include "lib/error.h"
#include "train/io/atomic_file.h"
#include "train/io/json.h"
#include "train/io/safetensors.h"
#include "train/io/text_file.h"

namespace ft {

namespace {

/// A config.json's fields, with the file named in every error.
class ConfigFields {
 public:
  ConfigFields(const JsonValue& root, std::string path) : root_(root), path_(std::move(path)) {}
  const JsonValue* find(const char* key) const {
    const JsonValue* v = root_.find(key);
    return v && v->kind != JsonValue::Kind::Null ? v : nullptr;
  }
  int64_t integer(const char* key, int64_t fallback) const {
    const JsonValue* v = find(key);
    if (!v) return fallback;
    FT_CHECK(v->kind == JsonValue::Kind::Integer, path_, ": \"", key, "\" must be an integer");
    return v->integer;
  }
  double number(const char* key, double fallback) const { return number_in(root_, key, fallback); }
  double number_in(const JsonValue& object, const char* key, double fallback) const {
    const JsonValue* v = object.find(key);
    if (!v || v->kind == JsonValue::Kind::Null) return fallback;
    FT_CHECK(v->is_number(), path_, ": \"", key, "\" must be a number");
    return v->number;
  }
  std::string text(const char* key, const std::string& fallback) const {
    const JsonValue* v = find(key);
    if (!v) return fallback;
    FT_CHECK(v->kind == JsonValue::Kind::String, path_, ": \"", key, "\" must be a string");
    return v->text;
  }
  bool boolean(const char* key, bool fallback) const {
    const JsonValue* v = find(key);
    if (!v) return fallback;
    FT_CHECK(v->kind == JsonValue::Kind::Bool, path_, ": \"", key, "\" must be true or false");
    return v->boolean;
  }

 private:
  const JsonValue& root_;
  std::string path_;
};

}  // namespace

LlamaConfig read_hf_llama_config(const std::string& given) {
  const std::string path =
      std::filesystem::is_directory(given) ? (std::filesystem::path(given) / "config.json").string() : given;
  const JsonValue root = parse_json(read_text_file(path, "read_hf_llama_config"), "config '" + path + "'");
  FT_CHECK(root.kind == JsonValue::Kind::Object, path, ": not a config.json (the top level is not an object)");
  const ConfigFields f(root, path);
  const std::string type = f.text("model_type", "");
  FT_CHECK(type == "llama" || type == "mistral", path, ": model_type '", type,
           "' is not supported (llama, and mistral without a sliding window, are)");
  FT_CHECK(type != "mistral" || !f.find("sliding_window"), path, ": a Mistral sliding window is not supported");
  FT_CHECK(f.text("hidden_act", "silu") == "silu", path, ": hidden_act '", f.text("hidden_act", ""),
           "' is not supported (silu is)");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    FT_CHECK(!f.boolean(bias, false), path, ": \"", bias, "\" is true: biases are not supported");
  LlamaConfig c;
  c.vocab = f.integer("vocab_size", 32000);
  c.hidden = f.integer("hidden_size", 4096);
  c.intermediate = f.integer("intermediate_size", 11008);
  c.layers = f.integer("num_hidden_layers", 32);
  c.heads = f.integer("num_attention_heads", 32);
  c.kv_heads = f.integer("num_key_value_heads", c.heads);
  c.head_dim = f.integer("head_dim", 0);
  c.max_positions = f.integer("max_position_embeddings", 2048);
  c.rms_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_embeddings = f.boolean("tie_word_embeddings", false);
  // transformers before v5 writes rope_theta and rope_scaling; v5 writes both into rope_parameters,
  // whose rope_type "default" means no scaling.
  const JsonValue* parameters = f.find("rope_parameters");
  c.rope.theta = parameters ? f.number_in(*parameters, "rope_theta", 10000.0) : f.number("rope_theta", 10000.0);
  const JsonValue* scaling = parameters ? parameters : f.find("rope_scaling");
  const JsonValue* kind = scaling ? scaling->find("rope_type") : nullptr;
  if (scaling && !kind) kind = scaling->find("type");
  if (kind && kind->kind == JsonValue::Kind::String && kind->text == "default") scaling = nullptr;
  if (scaling) {
    FT_CHECK(kind && kind->kind == JsonValue::Kind::String && kind->text == "llama3", path, ": rope type '",
             kind ? kind->text : "", "' is not supported (default and llama3 are)");
    c.rope.factor = f.number_in(*scaling, "factor", 8.0);
    c.rope.low_freq_factor = f.number_in(*scaling, "low_freq_factor", 1.0);
    c.rope.high_freq_factor = f.number_in(*scaling, "high_freq_factor", 4.0);
    c.rope.original_max_position =
        static_cast<int64_t>(f.number_in(*scaling, "original_max_position_embeddings", 8192));
  }
  try {
    c.check();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return c;
}

std::string hf_llama_config_json(const LlamaConfig& c, DType dtype) {
  std::string scaling = "null";
  if (c.rope.factor > 0)
    scaling = "{\"rope_type\": \"llama3\", \"factor\": " + json_number(c.rope.factor) +
              ", \"low_freq_factor\": " + json_number(c.rope.low_freq_factor) +
              ", \"high_freq_factor\": " + json_number(c.rope.high_freq_factor) +
              ", \"original_max_position_embeddings\": " + std::to_string(c.rope.original_max_position) + "}";
  auto field = [](const char* key, const std::string& value) { return "  \"" + std::string(key) + "\": " + value; };
  const std::vector<std::string> fields = {
      field("architectures", "[\"LlamaForCausalLM\"]"),
      field("model_type", "\"llama\""),
      field("vocab_size", std::to_string(c.vocab)),
      field("hidden_size", std::to_string(c.hidden)),
      field("intermediate_size", std::to_string(c.intermediate)),
      field("num_hidden_layers", std::to_string(c.layers)),
      field("num_attention_heads", std::to_string(c.heads)),
      field("num_key_value_heads", std::to_string(c.kv_heads)),
      field("head_dim", std::to_string(c.head_size())),
      field("max_position_embeddings", std::to_string(c.max_positions)),
      field("rms_norm_eps", json_number(c.rms_eps)),
      field("rope_theta", json_number(c.rope.theta)),
      field("rope_scaling", scaling),
      field("hidden_act", "\"silu\""),
      field("attention_bias", "false"),
      field("mlp_bias", "false"),
      field("tie_word_embeddings", c.tie_embeddings ? "true" : "false"),
      field("torch_dtype", dtype == DType::BF16 ? "\"bfloat16\"" : "\"float32\"")};
  std::string text = "{\n";
  for (size_t i = 0; i < fields.size(); ++i) text += fields[i] + (i + 1 < fields.size() ? ",\n" : "\n");
  return text + "}\n";
}

std::map<std::string, Tensor> load_hf_weights(const std::string& folder) {
  const std::filesystem::path root(folder);
  const std::filesystem::path single = root / "model.safetensors", index = root / "model.safetensors.index.json";
  if (!std::filesystem::exists(index)) {
    FT_CHECK(std::filesystem::exists(single), "'", folder, "' holds neither model.safetensors nor ",
             "model.safetensors.index.json");
    return load_safetensors(single.string()).tensors;
  }
  const std::string index_path = index.string();
  const JsonValue map = parse_json(read_text_file(index_path, "load_hf_weights"), "index '" + index_path + "'");
  const JsonValue* weights = map.find("weight_map");
  FT_CHECK(weights && weights->kind == JsonValue::Kind::Object, index_path, ": no \"weight_map\" object");
  std::map<std::string, std::set<std::string>> names_by_file;
  for (const auto& [name, file] : weights->members) {
    FT_CHECK(file.kind == JsonValue::Kind::String && file.text.find('/') == std::string::npos, index_path, ": '",
             name, "' maps to no plain file name");
    names_by_file[file.text].insert(name);
  }
  std::map<std::string, Tensor> out;
  for (const auto& [file, names] : names_by_file) {
    std::map<std::string, Tensor> tensors = load_safetensors((root / file).string()).tensors;
    for (const std::string& name : names) {
      auto found = tensors.find(name);
      FT_CHECK(found != tensors.end(), index_path, " maps '", name, "' to ", file, ", which lacks it");
      out.emplace(name, found->second);
    }
  }
  return out;
}

void load_hf_llama(Llama& model, const std::string& folder) {
  std::map<std::string, Tensor> tensors = load_hf_weights(folder);
  if (model.config().tie_embeddings) tensors.erase("lm_head.weight");
  const LoadReport report = model.load_state_dict(tensors, /*strict=*/false);
  FT_CHECK(report.ok(), "'", folder, "' does not fit this Llama:\n", report.str());
}

void save_hf_llama(const Llama& model, const std::string& folder, DType dtype) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  FT_CHECK(!ec, "save_hf_llama: cannot create '", folder, "': ", ec.message());
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace(name, t.dtype() == dtype ? t : t.to(dtype));
  save_safetensors((std::filesystem::path(folder) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file_atomically((std::filesystem::path(folder) / "config.json").string(),
                        hf_llama_config_json(model.config(), dtype), "save_hf_llama");
}

}  // namespace ft
