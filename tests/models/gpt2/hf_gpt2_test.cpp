// Hugging Face GPT-2 weights into fusedtrain: a fake HF state for a tiny config (random values,
// HF's layouts and buffers) converts with the four Conv1D weights transposed element for element,
// wte padded with zero rows, the buffers and lm_head dropped, loads strictly into a real GPT, and
// survives a safetensors round trip under the `transformer.` prefix. Broken states fail with one
// error naming every bad key.
#include <gtest/gtest.h>

#include "lib/error.h"
#include "models/gpt2/gpt.h"
#include "models/gpt2/gpt2_init.h"
#include "models/gpt2/hf_gpt2.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include "train/io/safetensors.h"

namespace ft {
namespace {

using test::all_equal;
using test::error_mentions;
constexpr int64_t kRows = 300;  // wte rows in the file, padded to the config's vocab
const GPTConfig kConfig{.vocab = 320, .block_size = 32, .layers = 2, .heads = 1, .channels = 64};

bool is_conv1d_weight(const std::string& name) {
  for (const char* module : {".attn.c_attn.", ".attn.c_proj.", ".mlp.c_fc.", ".mlp.c_proj."})
    if (name.find(module) != std::string::npos && name.ends_with(".weight")) return true;
  return false;
}

// GPT(kConfig)'s parameters as HF would save them: random values, Conv1D weights [in, out], wte
// with kRows rows, plus the two mask buffers of each block and the tied LM head.
std::map<std::string, Tensor> fake_hf(uint64_t seed, DType dtype = DType::F32) {
  Generator gen(seed);
  std::map<std::string, Tensor> hf;
  for (const auto& [name, p] : GPT(kConfig, 1).state_dict()) {
    Shape shape = p.shape();
    if (is_conv1d_weight(name)) std::swap(shape[0], shape[1]);
    if (name == "wte.weight") shape[0] = kRows;
    hf[name] = Tensor::randn(shape, gen, dtype);
  }
  for (int64_t l = 0; l < kConfig.layers; ++l) {
    hf["h." + std::to_string(l) + ".attn.bias"] = Tensor::randn({1, 1, kConfig.block_size, kConfig.block_size}, gen);
    hf["h." + std::to_string(l) + ".attn.masked_bias"] = Tensor::randn({}, gen);
  }
  hf["lm_head.weight"] = hf["wte.weight"];
  return hf;
}

std::map<std::string, Tensor> with_prefix(const std::map<std::string, Tensor>& hf) {
  std::map<std::string, Tensor> out;
  // GPT2LMHeadModel's layout: the body under `transformer.`, the head beside it.
  for (const auto& [name, t] : hf) out[name == "lm_head.weight" ? name : "transformer." + name] = t;
  return out;
}

void expect_same_state(const std::map<std::string, Tensor>& actual, const std::map<std::string, Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, t] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(actual.count(name));
    EXPECT_TRUE(all_equal(actual.at(name), t));
  }
}

TEST(HfGpt2, InfersTheConfig) {
  const auto hf = fake_hf(11);
  const GPTConfig c = hf_gpt2_config(hf, kConfig.vocab);
  EXPECT_EQ(c.vocab, 320);
  EXPECT_EQ(c.block_size, 32);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.channels, 64);
  EXPECT_EQ(c.heads, 1);  // 64-wide heads
  EXPECT_EQ(hf_gpt2_config(hf).vocab, kRows);
  EXPECT_EQ(hf_gpt2_config(with_prefix(hf)).layers, 2);
  // GPT-2's own vocabulary gets llm.c's padding.
  std::map<std::string, Tensor> gpt2 = hf;
  gpt2["wte.weight"] = Tensor::empty({50257, 64});
  EXPECT_EQ(hf_gpt2_config(gpt2).vocab, 50304);
  EXPECT_EQ(hf_gpt2_config(gpt2, 50257).vocab, 50257);
}

TEST(HfGpt2, ConvertsTransposesPadsAndLoadsStrictly) {
  const auto hf = fake_hf(12);
  const auto state = gpt2_state_from_hf(hf, kConfig);
  GPT model(kConfig, 5);
  EXPECT_EQ(state.size(), model.state_dict().size());  // the buffers and lm_head are gone
  for (const auto& [name, t] : state) {
    SCOPED_TRACE(name);
    const Tensor& src = hf.at(name);
    if (is_conv1d_weight(name)) {
      const int64_t in = src.size(0), out = src.size(1);
      ASSERT_EQ(t.shape(), (Shape{out, in}));
      EXPECT_FALSE(t.shares_storage(src));
      const float* a = t.data<float>();
      const float* b = src.data<float>();
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) ASSERT_EQ(a[o * in + i], b[i * out + o]) << "at [" << o << ", " << i << "]";
    } else if (name == "wte.weight") {
      ASSERT_EQ(t.shape(), (Shape{kConfig.vocab, kConfig.channels}));
      EXPECT_TRUE(all_equal(t.narrow(0, 0, kRows), src));
      EXPECT_TRUE(all_equal(t.narrow(0, kRows, kConfig.vocab - kRows), Tensor::zeros({20, 64})));
    } else {
      EXPECT_TRUE(all_equal(t, src));
    }
  }
  const LoadReport report = model.load_state_dict(state);  // strict
  EXPECT_TRUE(report.ok()) << report.str();
  expect_same_state(model.state_dict(), state);
}

TEST(HfGpt2, KeepsBf16) {
  const auto hf = fake_hf(13, DType::BF16);
  const auto state = gpt2_state_from_hf(hf, kConfig);
  for (const auto& [name, t] : state) EXPECT_EQ(t.dtype(), DType::BF16) << name;
  EXPECT_TRUE(all_equal(state.at("h.1.mlp.c_proj.weight"), hf.at("h.1.mlp.c_proj.weight").transpose()));
  GPT model(kConfig, 5);
  EXPECT_TRUE(model.load_state_dict(state).ok());
}

TEST(HfGpt2, TellsAnHfStateFromAFusedtrainOne) {
  const auto hf = fake_hf(14);
  EXPECT_TRUE(is_hf_gpt2(hf));
  EXPECT_TRUE(is_hf_gpt2(with_prefix(hf)));
  EXPECT_FALSE(is_hf_gpt2(GPT(kConfig, 1).state_dict()));  // what an ft-gpt2 checkpoint holds
  EXPECT_FALSE(is_hf_gpt2(gpt2_state_from_hf(hf, kConfig)));
  EXPECT_FALSE(is_hf_gpt2({}));
  EXPECT_TRUE(error_mentions([] { gpt2_state_from_hf(GPT(kConfig, 1).state_dict(), kConfig); },
                             "this is a fusedtrain state dict"));
}

TEST(HfGpt2, RoundTripsThroughSafetensorsWithThePrefix) {
  test::TempDir dir("ft_hf_gpt2");
  const auto hf = fake_hf(15);
  save_safetensors(dir.file("model.safetensors"), with_prefix(hf));
  const auto loaded = load_safetensors(dir.file("model.safetensors")).tensors;
  EXPECT_TRUE(loaded.count("transformer.h.1.attn.c_attn.weight"));
  ASSERT_TRUE(is_hf_gpt2(loaded));
  const GPTConfig c = hf_gpt2_config(loaded, kConfig.vocab);
  EXPECT_EQ(c.layers, kConfig.layers);
  EXPECT_EQ(c.block_size, kConfig.block_size);
  expect_same_state(gpt2_state_from_hf(loaded, c), gpt2_state_from_hf(hf, kConfig));
}

TEST(HfGpt2, ExportsWhatTheImportReadsBack) {
  GPT model(kConfig, 7);
  const std::map<std::string, Tensor> hf = hf_gpt2_state(model, DType::F32);
  EXPECT_TRUE(is_hf_gpt2(hf));
  EXPECT_EQ(hf.count("transformer.h.0.attn.c_attn.weight"), 1u);
  EXPECT_EQ(hf.at("transformer.h.1.mlp.c_fc.weight").shape(), (Shape{64, 256}));  // Conv1D: [in, out]
  EXPECT_EQ(hf.at("transformer.wte.weight").shape(), (Shape{kConfig.vocab, 64}));
  // Every tensor comes back exactly, through the folder and the importer.
  test::TempDir dir("hf_gpt2_export");
  save_hf_gpt2(model, dir.path().string(), DType::F32);
  GPT loaded(kConfig, 8);
  EXPECT_EQ(init_gpt2_from(loaded, dir.path().string()), "hugging face");
  const std::map<std::string, Tensor> ours = model.state_dict(), theirs = loaded.state_dict();
  for (const auto& [name, t] : ours) EXPECT_TRUE(all_equal(theirs.at(name), t)) << name;
  const std::string config = hf_gpt2_config_json(kConfig, DType::BF16);
  for (const char* field : {"\"model_type\": \"gpt2\"", "\"n_head\": 1", "\"n_positions\": 32", "\"vocab_size\": 320",
                            "\"activation_function\": \"gelu_new\"", "\"torch_dtype\": \"bfloat16\""})
    EXPECT_NE(config.find(field), std::string::npos) << field;
}

TEST(HfGpt2, ErrorsNameEachBadKey) {
  const auto hf = fake_hf(16);
  Generator gen(17);
  auto missing = hf, unknown = hf, misshaped = hf;
  missing.erase("h.1.ln_2.bias");
  unknown["h.0.attn.rotary.weight"] = Tensor::randn({4}, gen);
  misshaped["h.0.mlp.c_fc.weight"] = Tensor::randn({256, 64}, gen);  // fusedtrain's layout, not HF's
  EXPECT_TRUE(error_mentions([&] { gpt2_state_from_hf(missing, kConfig); }, "1 missing: h.1.ln_2.bias"));
  EXPECT_TRUE(error_mentions([&] { gpt2_state_from_hf(unknown, kConfig); }, "1 unexpected: h.0.attn.rotary.weight"));
  EXPECT_TRUE(error_mentions([&] { gpt2_state_from_hf(misshaped, kConfig); },
                             "h.0.mlp.c_fc.weight: got [256, 64], expected [64, 256]"));
  GPTConfig small_vocab = kConfig;
  small_vocab.vocab = 256;
  EXPECT_TRUE(error_mentions([&] { gpt2_state_from_hf(hf, small_vocab); }, "wte.weight: 300 rows"));

  // One error lists every problem, under the names the file uses.
  auto all = with_prefix(missing);
  all["transformer.h.0.attn.rotary.weight"] = unknown.at("h.0.attn.rotary.weight");
  all["transformer.h.0.mlp.c_fc.weight"] = misshaped.at("h.0.mlp.c_fc.weight");
  for (const char* part : {"gpt2_state_from_hf", "h.1.ln_2.bias", "transformer.h.0.attn.rotary.weight",
                           "transformer.h.0.mlp.c_fc.weight: got [256, 64]"})
    EXPECT_TRUE(error_mentions([&] { gpt2_state_from_hf(all, kConfig); }, part));

  auto no_wte = hf;
  no_wte.erase("wte.weight");
  EXPECT_TRUE(error_mentions([&] { hf_gpt2_config(no_wte); }, "wte.weight"));
  EXPECT_TRUE(error_mentions([&] { gpt2_state_from_hf(no_wte, kConfig); }, "missing: wte.weight"));
  EXPECT_TRUE(error_mentions([&] { hf_gpt2_config(hf, 256); }, "below wte.weight's 300 rows"));
  auto narrow = hf;
  narrow["wte.weight"] = Tensor::randn({kRows, 48}, gen);
  EXPECT_TRUE(error_mentions([&] { hf_gpt2_config(narrow); }, "not a multiple of GPT-2's head size 64"));
}

}  // namespace
}  // namespace ft
