// LoRA adapters in PEFT's format: a save/load round trip is bit-exact in names, values and config;
// the files hold what PEFT reads (prefixed f32 tensors, adapter_config.json's fields and target
// names); a bare "c_proj" selects both projections; and broken folders fail naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lib/error.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include "train/io/json.h"
#include "train/io/peft_adapter.h"
#include "train/io/safetensors.h"

namespace ft {
namespace {

using test::all_equal;
using test::error_mentions;
constexpr int64_t kC = 64, kRank = 4;

PeftLoraConfig lora_config() {
  return PeftLoraConfig{.r = kRank, .alpha = 16, .dropout = 0.05, .targets = {"qkv", "mlp_proj"}, .rslora = true,
                        .base_model = "gpt2"};
}

// A and B of qkv ([3C, C]) and mlp_proj ([C, 4C]) in two blocks, random.
std::map<std::string, Tensor> lora_tensors(uint64_t seed) {
  Generator gen(seed);
  std::map<std::string, Tensor> out;
  for (const std::string h : {"h.0.", "h.1."}) {
    out[h + "attn.c_attn.lora_A.weight"] = Tensor::randn({kRank, kC}, gen);
    out[h + "attn.c_attn.lora_B.weight"] = Tensor::randn({3 * kC, kRank}, gen);
    out[h + "mlp.c_proj.lora_A.weight"] = Tensor::randn({kRank, 4 * kC}, gen);
    out[h + "mlp.c_proj.lora_B.weight"] = Tensor::randn({kC, kRank}, gen);
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// `text` with its first `from` replaced by `to` (which the test expects to be there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

class PeftAdapterTest : public ::testing::Test {
 protected:
  std::string file(const std::string& name) const { return temp_.file(name); }
  test::TempDir temp_{"ft_peft"};
  const std::string dir_ = temp_.file("adapter");
};

TEST_F(PeftAdapterTest, RoundTripIsBitExact) {
  const auto tensors = lora_tensors(21);
  save_peft_adapter(dir_, tensors, lora_config());  // creates the folder
  const PeftAdapter back = load_peft_adapter(dir_);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(back.tensors.count(name));
    const Tensor& b = back.tensors.at(name);
    ASSERT_EQ(b.shape(), t.shape());
    ASSERT_EQ(b.dtype(), DType::F32);
    EXPECT_EQ(std::memcmp(b.data_ptr(), t.data_ptr(), t.nbytes()), 0);
  }
  const PeftLoraConfig want = lora_config();
  EXPECT_EQ(back.config.r, want.r);
  EXPECT_EQ(back.config.alpha, want.alpha);
  EXPECT_EQ(back.config.dropout, want.dropout);
  EXPECT_EQ(back.config.targets, want.targets);
  EXPECT_EQ(back.config.rslora, want.rslora);
  EXPECT_EQ(back.config.base_model, want.base_model);

  // bf16 tensors are written as f32; the same values come back.
  std::map<std::string, Tensor> bf16;
  for (const auto& [name, t] : tensors) bf16[name] = t.to(DType::BF16);
  save_peft_adapter(dir_, bf16, lora_config());
  const PeftAdapter widened = load_peft_adapter(dir_);
  for (const auto& [name, t] : bf16) EXPECT_TRUE(all_equal(widened.tensors.at(name), t)) << name;
}

TEST_F(PeftAdapterTest, WritesWhatPeftReads) {
  PeftLoraConfig config = lora_config();
  config.targets = {"mlp_proj", "qkv"};  // written in the table's order
  save_peft_adapter(dir_, lora_tensors(22), config);

  const SafetensorsFile weights = load_safetensors(dir_ + "/adapter_model.safetensors");
  EXPECT_EQ(weights.metadata.at("format"), "pt");
  for (const auto& [key, t] : weights.tensors) {
    EXPECT_EQ(key.rfind("base_model.model.transformer.h.", 0), 0u) << key;
    EXPECT_EQ(t.dtype(), DType::F32) << key;
  }
  EXPECT_TRUE(weights.tensors.count("base_model.model.transformer.h.1.attn.c_attn.lora_B.weight"));

  const JsonValue json = parse_json(read_text(dir_ + "/adapter_config.json"), "adapter_config.json");
  auto text = [&](const char* key) { return json.find(key)->text; };
  EXPECT_EQ(text("peft_type"), "LORA");
  EXPECT_EQ(text("task_type"), "CAUSAL_LM");
  EXPECT_EQ(text("bias"), "none");
  EXPECT_EQ(text("base_model_name_or_path"), "gpt2");
  EXPECT_EQ(json.find("r")->kind, JsonValue::Kind::Integer);
  EXPECT_EQ(json.find("r")->integer, kRank);
  EXPECT_EQ(json.find("lora_alpha")->number, 16.0);
  EXPECT_EQ(json.find("lora_dropout")->number, 0.05);
  EXPECT_TRUE(json.find("use_rslora")->boolean);
  EXPECT_TRUE(json.find("fan_in_fan_out")->boolean);
  EXPECT_EQ(json.find("inference_mode")->kind, JsonValue::Kind::Bool);
  EXPECT_FALSE(json.find("inference_mode")->boolean);
  std::vector<std::string> modules;
  for (const JsonValue& m : json.find("target_modules")->items) modules.push_back(m.text);
  EXPECT_EQ(modules, (std::vector<std::string>{"c_attn", "mlp.c_proj"}));

  // Every target's PEFT name, and no base model written as null.
  config.targets = {"qkv", "attn_proj", "fc", "mlp_proj"};
  config.rslora = false;
  config.base_model.clear();
  save_peft_adapter(dir_, lora_tensors(22), config);
  const std::string written = read_text(dir_ + "/adapter_config.json");
  EXPECT_NE(written.find("\"target_modules\": [\"c_attn\", \"attn.c_proj\", \"c_fc\", \"mlp.c_proj\"]"),
            std::string::npos) << written;
  EXPECT_NE(written.find("\"use_rslora\": false"), std::string::npos) << written;
  EXPECT_NE(written.find("\"base_model_name_or_path\": null"), std::string::npos) << written;
  EXPECT_EQ(load_peft_adapter(dir_).config.targets, config.targets);
  EXPECT_EQ(load_peft_adapter(dir_).config.base_model, "");
}

TEST_F(PeftAdapterTest, BareCProjSelectsBothProjections) {
  save_peft_adapter(dir_, lora_tensors(23), lora_config());
  const std::string path = dir_ + "/adapter_config.json";
  write_text(path, replaced(read_text(path), "\"mlp.c_proj\"", "\"c_proj\""));
  EXPECT_EQ(load_peft_adapter(dir_).config.targets, (std::vector<std::string>{"qkv", "attn_proj", "mlp_proj"}));
}

TEST_F(PeftAdapterTest, BrokenFoldersNameTheFile) {
  save_peft_adapter(dir_, lora_tensors(24), lora_config());
  const std::string config_path = dir_ + "/adapter_config.json", weights_path = dir_ + "/adapter_model.safetensors";
  const std::string config_text = read_text(config_path), weights_bytes = read_text(weights_path);
  auto load_fails = [&](const std::string& word) { return error_mentions([&] { load_peft_adapter(dir_); }, word); };

  EXPECT_TRUE(error_mentions([&] { load_peft_adapter(file("nowhere")); }, "adapter_config.json' does not exist"));
  std::filesystem::remove(weights_path);
  EXPECT_TRUE(load_fails("adapter_model.safetensors' does not exist"));
  write_text(weights_path, weights_bytes.substr(0, weights_bytes.size() - 9));  // truncated
  EXPECT_TRUE(load_fails("adapter_model.safetensors"));
  EXPECT_TRUE(load_fails("truncated"));
  write_text(weights_path, weights_bytes);

  write_text(config_path, replaced(config_text, "\"LORA\"", "\"LOHA\""));
  EXPECT_TRUE(load_fails("adapter_config.json': peft_type is \"LOHA\""));
  write_text(config_path, replaced(config_text, "\"r\": 4", "\"r\": 0"));
  EXPECT_TRUE(load_fails("r must be > 0"));
  write_text(config_path, replaced(config_text, "\"r\": 4", "\"r\": 4.5"));
  EXPECT_TRUE(load_fails("\"r\" must be an integer"));
  write_text(config_path, replaced(config_text, "\"r\": 4", "\"r\": 5"));  // the tensors have rank 4
  EXPECT_TRUE(load_fails("but r = 5"));
  write_text(config_path, replaced(config_text, "\"c_attn\"", "\"q_proj\""));
  EXPECT_TRUE(load_fails("\"q_proj\" selects none"));
  write_text(config_path, replaced(config_text, "\"rank_pattern\": {}", "\"rank_pattern\": {\"c_attn\": 8}"));
  EXPECT_TRUE(load_fails("rank_pattern"));
  write_text(config_path, config_text.substr(0, config_text.size() / 2));
  EXPECT_TRUE(load_fails("adapter_config.json': bad JSON at byte"));
  write_text(config_path, config_text);
  EXPECT_NO_THROW(load_peft_adapter(dir_));

  // Tensors: an A without its B, a shape off r, a module outside the targets, a key off the prefix.
  auto save_raw = [&](const std::map<std::string, Tensor>& tensors) {
    std::map<std::string, Tensor> keyed;
    for (const auto& [name, t] : tensors) keyed["base_model.model.transformer." + name] = t;
    save_safetensors(weights_path, keyed);
  };
  Generator gen(25);
  auto lone_a = lora_tensors(26);
  lone_a.erase("h.1.mlp.c_proj.lora_B.weight");
  save_raw(lone_a);
  EXPECT_TRUE(load_fails("'h.1.mlp.c_proj.lora_A.weight' has no lora_B.weight"));
  auto off_rank = lora_tensors(26);
  off_rank["h.0.attn.c_attn.lora_A.weight"] = Tensor::randn({kRank + 1, kC}, gen);
  save_raw(off_rank);
  EXPECT_TRUE(load_fails("tensor 'h.0.attn.c_attn.lora_A.weight' is [5, 64] but r = 4"));
  auto off_target = lora_tensors(26);
  off_target["h.0.mlp.c_fc.lora_A.weight"] = Tensor::randn({kRank, kC}, gen);
  off_target["h.0.mlp.c_fc.lora_B.weight"] = Tensor::randn({4 * kC, kRank}, gen);
  save_raw(off_target);
  EXPECT_TRUE(load_fails("adapts fc, which is not among the targets"));
  save_raw(lora_tensors(26));
  SafetensorsFile with_head = load_safetensors(weights_path);
  with_head.tensors["base_model.model.lm_head.lora_A.weight"] = Tensor::randn({kRank, kC}, gen);
  save_safetensors(weights_path, with_head.tensors);
  EXPECT_TRUE(load_fails("tensor 'base_model.model.lm_head.lora_A.weight' does not start with"));
}

TEST_F(PeftAdapterTest, SaveRefusesWhatPeftCouldNotLoad) {
  const auto tensors = lora_tensors(27);
  PeftLoraConfig config = lora_config();
  config.targets = {"qkv", "mlp_proj", "lm_head"};
  EXPECT_TRUE(error_mentions([&] { save_peft_adapter(dir_, tensors, config); }, "unknown LoRA target 'lm_head'"));
  config.targets = {"qkv"};
  EXPECT_TRUE(error_mentions([&] { save_peft_adapter(dir_, tensors, config); }, "adapts mlp_proj"));
  config = lora_config();
  config.r = 8;
  EXPECT_TRUE(error_mentions([&] { save_peft_adapter(dir_, tensors, config); }, "but r = 8"));
  config = lora_config();
  config.dropout = 1;
  EXPECT_TRUE(error_mentions([&] { save_peft_adapter(dir_, tensors, config); }, "lora_dropout"));
  EXPECT_FALSE(std::filesystem::exists(dir_));  // nothing written
}

}  // namespace
}  // namespace ft
