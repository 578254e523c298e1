// LoRA on GPT-2 (layers/lora.h, GPT::add_lora) on the CPU and, where there is one, the GPU: a new
// adapter changes nothing; only the adapters train and every base weight stays bit-identical;
// the adapters' names and shapes are PEFT's; merge then unmerge gives W back bit for bit and
// merged outputs match unmerged ones; bad targets and ranks are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/runtime.h"
#include "models/gpt2/gpt.h"
#include "optim/adamw.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

GPTConfig tiny() { return GPTConfig{.vocab = 29, .block_size = 16, .layers = 2, .heads = 2, .channels = 16}; }
const std::vector<std::string> kAllTargets = {"qkv", "attn_proj", "fc", "mlp_proj"};

Tensor random_tokens(int64_t b, int64_t t, int64_t vocab, Generator& gen, Device device) {
  return random_ids({b, t}, vocab, DType::I64, kCPU, gen).to(device);
}

std::vector<Device> devices() {
  std::vector<Device> out = {kCPU};
  if (cuda_available()) out.push_back(kCUDA);
  return out;
}

TEST(LoRAGpt, ANewAdapterChangesNothingAndHasPeftNamesAndShapes) {
  for (Device device : devices()) {
    SCOPED_TRACE(device.str());
    Generator gen = test_generator();
    GPT model(tiny(), 3);
    model.to(device, device.is_cuda() ? DType::BF16 : DType::F32);
    const Tensor ids = random_tokens(2, 16, 29, gen, device);
    const Tensor before = model.logits(ids);
    model.add_lora(LoRAConfig{.rank = 4, .alpha = 8}, kAllTargets, 5);
    EXPECT_TRUE(all_equal(model.logits(ids), before));
    const std::map<std::string, Tensor> lora = model.lora_state_dict();
    ASSERT_EQ(lora.size(), 2u * 4u * 2u);  // 2 layers × 4 targets × (A, B)
    EXPECT_EQ(lora.at("h.0.attn.c_attn.lora_A.weight").shape(), (Shape{4, 16}));
    EXPECT_EQ(lora.at("h.0.attn.c_attn.lora_B.weight").shape(), (Shape{48, 4}));
    EXPECT_EQ(lora.at("h.1.mlp.c_proj.lora_A.weight").shape(), (Shape{4, 64}));
    EXPECT_EQ(lora.at("h.1.mlp.c_proj.lora_B.weight").shape(), (Shape{16, 4}));
    // Only the adapters train; the base keeps its names.
    const auto trainable = model.named_trainable_parameters();
    EXPECT_EQ(trainable.size(), lora.size());
    for (const auto& [name, t] : trainable) EXPECT_TRUE(lora.contains(name)) << name;
    EXPECT_TRUE(model.state_dict().contains("h.0.attn.c_attn.weight"));
  }
}

TEST(LoRAGpt, OnlyTheAdaptersTrainAndTheBaseStaysBitIdentical) {
  for (Device device : devices()) {
    for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
      if (device.is_cpu() && mode == KernelMode::Unfused) continue;
      SCOPED_TRACE(device.str() + " " + kernel_mode_name(mode));
      KernelModeGuard guard(mode);
      Generator gen = test_generator();
      GPT model(tiny(), 4);
      // Token embeddings of unit size, as a trained model's: the frozen tied head can then give
      // confident logits (at GPT-2's 0.02 init it cannot, whatever the adapters do).
      model.state_dict().at("wte.weight").copy_(Tensor::randn({29, 16}, gen, DType::F32));
      model.to(device, device.is_cuda() ? DType::BF16 : DType::F32);
      model.add_lora(LoRAConfig{.rank = 4, .alpha = 8, .dropout = 0.1, .seed = 9}, {"qkv", "fc"}, 6);
      std::map<std::string, std::vector<double>> base;
      for (const auto& [name, t] : model.named_parameters())
        if (!t.requires_grad()) base[name] = t.to_vector();
      AdamW optimizer(model.trainable_parameters(), AdamW::Options{.lr = 1e-2});
      // A fixed map of the current token (7·id + 3 mod 29): learnable through the adapters alone.
      const Tensor ids_cpu = random_ids({4, 16}, 29, DType::I64, kCPU, gen);
      std::vector<double> mapped = ids_cpu.to_vector();
      for (double& v : mapped) v = std::fmod(7.0 * v + 3.0, 29.0);
      const Tensor ids = ids_cpu.to(device), targets = Tensor::from_vector(mapped, {4, 16}, DType::I64, device);
      double first = 0, last = 0;
      for (int step = 0; step < 40; ++step) {
        optimizer.zero_grad();
        const Tensor loss = model.loss(ids, targets);
        loss.backward();
        optimizer.step();
        (step == 0 ? first : last) = loss.item();
      }
      EXPECT_LT(last, first - 0.5) << "the adapters did not learn: " << first << " -> " << last;
      for (const auto& [name, t] : model.named_parameters()) {
        if (base.contains(name)) { EXPECT_EQ(t.to_vector(), base[name]) << name << " changed"; }
      }
    }
  }
}

TEST(LoRAGpt, MergeThenUnmergeRestoresWExactly) {
  for (Device device : devices()) {
    SCOPED_TRACE(device.str());
    Generator gen = test_generator();
    auto base = std::make_shared<Linear>(Linear::Options{.in = 40, .out = 24, .activation = Activation::GELU}, gen);
    base->to(device, device.is_cuda() ? DType::BF16 : DType::F32);
    LoRALinear layer(base, LoRAConfig{.rank = 8, .alpha = 16}, gen);
    layer.lora_b().detach().copy_(Tensor::randn({24, 8}, gen, DType::F32) * 0.05);  // a trained adapter
    layer.eval();
    const Tensor x = Tensor::randn({5, 40}, gen, DType::F32).to(device).to(layer.weight().dtype());
    const std::vector<double> w = layer.weight().to_vector();
    const Tensor y = layer.forward(x);
    layer.merge();
    EXPECT_NE(layer.weight().to_vector(), w);
    EXPECT_TRUE(all_close(layer.forward(x), y, device.is_cuda() ? 2e-2 : 1e-5));
    EXPECT_FT_ERROR(layer.merge(), "merged already");
    layer.unmerge();
    EXPECT_EQ(layer.weight().to_vector(), w);
    EXPECT_FT_ERROR(layer.unmerge(), "not merged");
  }
}

TEST(LoRAGpt, BadTargetsAndRanksAreClearErrors) {
  GPT model(tiny(), 1);
  EXPECT_FT_ERROR(model.add_lora(LoRAConfig{.rank = 4}, {"qkv", "c_attn"}, 1), "unknown target 'c_attn'");
  EXPECT_FT_ERROR(model.add_lora(LoRAConfig{.rank = 0}, {"qkv"}, 1), "at least 1");
  EXPECT_FT_ERROR(model.add_lora(LoRAConfig{.rank = 17}, {"attn_proj"}, 1), "exceeds min(IN, OUT)");
  EXPECT_FT_ERROR(model.add_lora(LoRAConfig{.rank = 4, .dropout = 1.0}, {"qkv"}, 1), "dropout");
  EXPECT_FT_ERROR(model.add_lora(LoRAConfig{.rank = 4}, {}, 1), "no targets");
}

}  // namespace
}  // namespace ft
