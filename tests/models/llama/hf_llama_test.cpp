// Hugging Face Llama folders: config.json read with transformers' defaults and refused by field
// when it asks for what the model lacks; weights written and read back (bf16 and f32, one file
// or shards with an index), the loss unchanged; a folder that does not fit named by tensor.
// tests/parity/llama_parity.py loads the written folders in transformers on the device.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/llama/hf_llama.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include "train/io/peft_adapter.h"
#include "train/io/safetensors.h"

namespace ft {
namespace {

using test::error_mentions;
using test::TempDir;

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

LlamaConfig small(bool tied) {
  return {.vocab = 40, .hidden = 16, .intermediate = 24, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 0,
          .max_positions = 32, .rms_eps = 1e-5,
          .rope = {.theta = 500000.0, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                   .original_max_position = 16},
          .tie_embeddings = tied};
}

TEST(HfLlama, ConfigReadsTransformersFieldsAndDefaults) {
  TempDir dir("ft_hf_llama");
  write(dir.file("config.json"),
        R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
            "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
            "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
            "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "tie_word_embeddings": true, "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 128000})");
  const LlamaConfig c = read_hf_llama_config(dir.path().string());  // Llama 3.2 1B's
  EXPECT_EQ(c.vocab, 128256);
  EXPECT_EQ(c.head_size(), 64);
  EXPECT_EQ(c.kv_heads, 8);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.original_max_position, 8192);
  // transformers v5's form: the rope's theta and scaling in rope_parameters.
  write(dir.file("v5.json"),
        R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "rope_parameters":
            {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}})");
  const LlamaConfig v5 = read_hf_llama_config(dir.file("v5.json"));
  EXPECT_EQ(v5.rope.theta, 500000.0);
  EXPECT_EQ(v5.rope.factor, 8.0);
  EXPECT_EQ(v5.rope.original_max_position, 64);
  write(dir.file("v5-default.json"), R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                         "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0}})");
  EXPECT_EQ(read_hf_llama_config(dir.file("v5-default.json")).rope, (RopeConfig{.theta = 1000.0}));
  write(dir.file("plain.json"), R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4})");
  const LlamaConfig d = read_hf_llama_config(dir.file("plain.json"));
  EXPECT_EQ(d.kv_heads, 4);  // defaults to the query heads
  EXPECT_EQ(d.rope.theta, 10000.0);
  EXPECT_EQ(d.rope.factor, 0.0);
  EXPECT_EQ(d.layers, 32);
}

TEST(HfLlama, ConfigRefusesWhatTheModelLacks) {
  TempDir dir("ft_hf_llama");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model_type": "qwen2"})", "model_type 'qwen2' is not supported"},
      {R"({"model_type": "llama", "hidden_act": "gelu"})", "hidden_act 'gelu'"},
      {R"({"model_type": "llama", "attention_bias": true})", "\"attention_bias\" is true"},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4}})", "rope type 'yarn'"},
      {R"({"model_type": "mistral", "sliding_window": 4096})", "sliding window"},
      {R"({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 6})", "groups of 6"},
      {R"({"model_type": "llama", "vocab_size": "many"})", "\"vocab_size\" must be an integer"},
      {R"({"model_type": "llama", )", "at byte"}};
  for (const auto& [json, message] : cases) {
    SCOPED_TRACE(json);
    write(dir.file("config.json"), json);
    EXPECT_TRUE(error_mentions([&] { read_hf_llama_config(dir.path().string()); }, message));
    EXPECT_TRUE(error_mentions([&] { read_hf_llama_config(dir.path().string()); }, "config.json"));
  }
}

TEST(HfLlama, WeightsGoOutAndComeBackInEitherForm) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TempDir dir("ft_hf_llama");
    Llama model(small(tied), 3);
    const Tensor ids = Tensor::from_vector({1, 5, 9, 39, 0, 2}, {1, 6}, DType::I64);
    const double loss = model.loss(ids, ids).item();
    save_hf_llama(model, dir.file("f32"), DType::F32);
    const LlamaConfig read = read_hf_llama_config(dir.file("f32"));
    EXPECT_EQ(read.rope, small(tied).rope);
    EXPECT_EQ(read.tie_embeddings, tied);
    Llama back(read, 99);  // other weights until loaded
    EXPECT_NE(back.loss(ids, ids).item(), loss);
    load_hf_llama(back, dir.file("f32"));
    EXPECT_EQ(back.loss(ids, ids).item(), loss);
    // bf16: the loss moves by the weights' rounding only.
    save_hf_llama(model, dir.file("bf16"), DType::BF16);
    EXPECT_EQ(load_safetensors(dir.file("bf16/model.safetensors")).tensors.at("model.norm.weight").dtype(), DType::BF16);
    Llama rounded(read, 99);
    load_hf_llama(rounded, dir.file("bf16"));
    EXPECT_NEAR(rounded.loss(ids, ids).item(), loss, 1e-2 * loss);
  }
}

TEST(HfLlama, ShardedWeightsFollowTheIndex) {
  TempDir dir("ft_hf_llama");
  Llama model(small(false), 4);
  std::map<std::string, Tensor> first, second;
  std::string map;
  for (const auto& [name, t] : model.state_dict()) {
    const bool in_first = name.find("layers.1.") == std::string::npos && name != "lm_head.weight";
    (in_first ? first : second).emplace(name, t);
    map += std::string(map.empty() ? "" : ", ") + "\"" + name + "\": \"model-0000" + (in_first ? "1" : "2") +
           "-of-00002.safetensors\"";
  }
  save_safetensors(dir.file("model-00001-of-00002.safetensors"), first);
  save_safetensors(dir.file("model-00002-of-00002.safetensors"), second);
  write(dir.file("model.safetensors.index.json"), "{\"metadata\": {}, \"weight_map\": {" + map + "}}");
  write(dir.file("config.json"), hf_llama_config_json(small(false), DType::F32));
  Llama back(read_hf_llama_config(dir.path().string()), 5);
  load_hf_llama(back, dir.path().string());
  const Tensor ids = Tensor::from_vector({3, 1, 4, 1, 5}, {1, 5}, DType::I64);
  EXPECT_EQ(back.loss(ids, ids).item(), model.loss(ids, ids).item());
  // A name mapped to a shard that lacks it, and a model the files do not fit.
  write(dir.file("model.safetensors.index.json"),
        "{\"weight_map\": {\"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}");
  EXPECT_TRUE(error_mentions([&] { load_hf_weights(dir.path().string()); }, "maps 'model.norm.weight' to model-00002"));
  std::filesystem::remove(dir.file("model.safetensors.index.json"));
  EXPECT_TRUE(error_mentions([&] { load_hf_weights(dir.path().string()); }, "holds neither model.safetensors"));
  save_hf_llama(model, dir.file("other"), DType::F32);
  LlamaConfig wider = small(false);
  wider.intermediate = 32;
  Llama mismatched(wider, 6);
  EXPECT_TRUE(error_mentions([&] { load_hf_llama(mismatched, dir.file("other")); }, "mlp.gate_proj.weight"));
}

TEST(HfLlama, LoraAdaptersInPeftsFilesForLlama) {
  TempDir dir("ft_hf_llama");
  Llama model(small(false), 8);
  model.add_lora({.rank = 4, .alpha = 8.0}, {"q_proj", "v_proj", "down_proj"}, 9);
  Generator gen(10);
  for (const auto& [name, p] : model.lora_state_dict())
    if (name.find("lora_B") != std::string::npos) p.copy_(Tensor::randn(p.shape(), gen) * 0.1);
  const PeftLoraConfig config{.r = 4, .alpha = 8.0, .targets = {"q_proj", "v_proj", "down_proj"},
                              .base_model = "tiny-llama"};
  save_peft_adapter(dir.path().string(), model.lora_state_dict(), config, llama_peft_layout());
  // PEFT's names for LlamaForCausalLM, and its config.
  const auto saved = load_safetensors(dir.file("adapter_model.safetensors")).tensors;
  EXPECT_EQ(saved.size(), 2u * 3u * 2u);
  EXPECT_EQ(saved.at("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight").shape(), (Shape{4, 16}));
  EXPECT_EQ(saved.at("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight").shape(), (Shape{16, 4}));
  std::ifstream in(dir.file("adapter_config.json"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"target_modules\": [\"q_proj\", \"v_proj\", \"down_proj\"]"), std::string::npos) << text;
  EXPECT_NE(text.find("\"fan_in_fan_out\": false"), std::string::npos) << text;
  // Back in, the same tensors; a GPT-2 reading of the folder refuses it by name.
  const PeftAdapter back = load_peft_adapter(dir.path().string(), llama_peft_layout());
  EXPECT_EQ(back.config.targets, config.targets);
  for (const auto& [name, t] : model.lora_state_dict())
    EXPECT_EQ(back.tensors.at(name).to_vector(), t.to(DType::F32).to_vector()) << name;
  EXPECT_TRUE(error_mentions([&] { load_peft_adapter(dir.path().string()); }, "selects none of GPT-2's"));
  PeftLoraConfig gpt2_target = config;
  gpt2_target.targets = {"qkv"};
  EXPECT_TRUE(error_mentions([&] { save_peft_adapter(dir.file("bad"), model.lora_state_dict(), gpt2_target,
                                                     llama_peft_layout()); },
                             "unknown LoRA target 'qkv' (expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj or "
                             "down_proj)"));
}

}  // namespace
}  // namespace ft
