// LoRA fine-tuning end to end on the CPU (CI runs it): a tiny byte-level GPT trained on one text,
// then LoRA-fine-tuned on another. The loss on the new text must fall clearly, every base weight
// must stay bit-identical, the adapters saved in PEFT's format and loaded into a fresh copy of the
// base must give the same logits, and merge then unmerge must give W back exactly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/autograd.h"
#include "models/gpt2/gpt.h"
#include "optim/adamw.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include "train/io/peft_adapter.h"

namespace ft {
namespace {

using namespace ft::test;

GPTConfig byte_model() { return GPTConfig{.vocab = 256, .block_size = 32, .layers = 2, .heads = 2, .channels = 32}; }

std::string repeat(const std::string& s, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += s;
  return out;
}

// B windows of T + 1 bytes of `text` at random starts: inputs and next-byte targets.
std::pair<Tensor, Tensor> windows(const std::string& text, int64_t b, int64_t t, Generator& gen) {
  const std::vector<double> starts = Tensor::rand({b}, gen, DType::F64).to_vector();
  std::vector<double> in, out;
  for (double s : starts) {
    const size_t at = static_cast<size_t>(s * static_cast<double>(text.size() - static_cast<size_t>(t) - 1));
    for (int64_t j = 0; j < t; ++j) {
      in.push_back(static_cast<unsigned char>(text[at + static_cast<size_t>(j)]));
      out.push_back(static_cast<unsigned char>(text[at + static_cast<size_t>(j) + 1]));
    }
  }
  return {Tensor::from_vector(in, {b, t}, DType::I64), Tensor::from_vector(out, {b, t}, DType::I64)};
}

double train(GPT& model, const std::string& text, int steps, double lr, Generator& gen) {
  AdamW optimizer(model.trainable_parameters(), AdamW::Options{.lr = lr, .weight_decay = 0.0});
  double loss = 0;
  for (int s = 0; s < steps; ++s) {
    const auto [ids, targets] = windows(text, 8, 32, gen);
    optimizer.zero_grad();
    const Tensor l = model.loss(ids, targets);
    l.backward();
    optimizer.step();
    loss = l.item();
  }
  return loss;
}

double eval_loss(GPT& model, const std::string& text, Generator& gen) {
  NoGradGuard no_grad;
  model.eval();
  double sum = 0;
  for (int i = 0; i < 8; ++i) {
    const auto [ids, targets] = windows(text, 8, 32, gen);
    sum += model.loss(ids, targets).item();
  }
  model.train();
  return sum / 8.0;
}

TEST(LoRAFineTune, TinyByteModelLearnsANewTextWithItsBaseUnchanged) {
  const std::string first = repeat("the quick brown fox jumps over the lazy dog, and the dog sleeps on. ", 40);
  const std::string second = repeat("1, 2, 3, 5, 8, 13, 21, 34, 55, 89 are fibonacci numbers; 144 is next. ", 40);
  Generator gen(17);
  GPT model(byte_model(), 3);
  train(model, first, 150, 3e-3, gen);
  const double before = eval_loss(model, second, gen);
  const std::map<std::string, Tensor> base_state = model.state_dict();
  std::map<std::string, std::vector<double>> base;
  for (const auto& [name, t] : base_state) base[name] = t.to_vector();

  model.add_lora(LoRAConfig{.rank = 8, .alpha = 16, .dropout = 0.05, .seed = 5}, {"qkv", "attn_proj", "fc", "mlp_proj"},
                 7);
  train(model, second, 150, 1e-2, gen);
  const double after = eval_loss(model, second, gen);
  EXPECT_LT(after, 0.6 * before) << "loss on the new text: " << before << " -> " << after;
  for (const auto& [name, t] : model.named_parameters()) {
    if (base.contains(name)) { EXPECT_EQ(t.to_vector(), base.at(name)) << name << " changed"; }
  }

  // Saved as PEFT does, loaded into a fresh copy of the base: the same logits, bit for bit.
  TempDir dir("ft_lora");
  save_peft_adapter(dir.path().string(), model.lora_state_dict(),
                    PeftLoraConfig{.r = 8, .alpha = 16, .dropout = 0.05, .targets = {"qkv", "attn_proj", "fc", "mlp_proj"},
                                   .rslora = false, .base_model = ""});
  const PeftAdapter adapter = load_peft_adapter(dir.path().string());
  GPT copy(byte_model(), 99);
  copy.load_state_dict(base_state);
  copy.add_lora(LoRAConfig{.rank = adapter.config.r, .alpha = adapter.config.alpha, .dropout = adapter.config.dropout},
                adapter.config.targets, 1);
  const LoadReport report = copy.load_state_dict(adapter.tensors, /*strict=*/false);
  EXPECT_EQ(report.loaded.size(), adapter.tensors.size());
  model.eval();
  copy.eval();
  const auto [ids, targets] = windows(second, 2, 32, gen);
  const Tensor logits = model.logits(ids);
  EXPECT_TRUE(all_equal(copy.logits(ids), logits));
}

}  // namespace
}  // namespace ft
