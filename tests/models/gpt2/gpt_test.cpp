// The GPT-2 model on the CPU: shapes and the initial loss, gradients of the loss against
// central differences in f64, and a tiny model learning a sequence.
#include <gtest/gtest.h>

#include <cmath>

#include "lib/autograd.h"
#include "lib/error.h"
#include "models/gpt2/gpt.h"
#include "optim/adamw.h"

namespace ft {
namespace {

GPTConfig tiny() { return GPTConfig{.vocab = 13, .block_size = 8, .layers = 2, .heads = 2, .channels = 8}; }

Tensor cyclic_ids(int64_t b, int64_t t, int64_t vocab, int64_t shift) {
  std::vector<double> v;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j) v.push_back(static_cast<double>((i * 3 + j + shift) % vocab));
  return Tensor::from_vector(v, {b, t}, DType::I64);
}

TEST(GPT, ShapeCountsEveryParameterFromTheConfigAlone) {
  for (const GPTConfig& c : {tiny(), GPTConfig{.vocab = 50, .block_size = 16, .layers = 3, .heads = 3, .channels = 12}}) {
    GPT model(c, 1);
    EXPECT_EQ(model.shape().parameters, model.parameter_count());
    EXPECT_EQ(c.parameter_count(), model.parameter_count());
    EXPECT_EQ(model.shape().family, "gpt2");
    EXPECT_EQ(model.shape().max_seq, c.block_size);
  }
  EXPECT_EQ(GPT(tiny(), 1).lora_target_names(), (std::vector<std::string>{"qkv", "attn_proj", "fc", "mlp_proj"}));
}

TEST(GPT, InitialLossIsNearTheUniformGuess) {
  GPT model(tiny(), 1);
  const Tensor ids = cyclic_ids(3, 8, 13, 0), targets = cyclic_ids(3, 8, 13, 1);
  EXPECT_EQ(model.hidden(ids).shape(), (Shape{3, 8, 8}));
  EXPECT_NEAR(model.loss(ids, targets).item(), std::log(13.0), 0.15);
  EXPECT_THROW(model.loss(cyclic_ids(1, 9, 13, 0), cyclic_ids(1, 9, 13, 1)), Error);
}

TEST(GPT, GradientsMatchCentralDifferencesInF64) {
  GPT model(tiny(), 2);
  model.to(kCPU, DType::F64);
  const Tensor ids = cyclic_ids(2, 5, 13, 0), targets = cyclic_ids(2, 5, 13, 4);
  model.loss(ids, targets).backward();
  // A few entries of every kind of parameter: embeddings, norms, QKV, projections, MLP.
  int checked = 0;
  for (auto& [name, p] : model.named_parameters()) {
    const Tensor grad = p.grad();
    ASSERT_TRUE(grad.defined()) << name;
    const std::vector<double> g = grad.to_vector();
    for (int64_t i : {int64_t{0}, p.numel() / 2, p.numel() - 1}) {
      NoGradGuard no_grad;
      std::vector<double> values = p.to_vector();
      const double eps = 1e-6, original = values[static_cast<size_t>(i)];
      values[static_cast<size_t>(i)] = original + eps;
      p.copy_(Tensor::from_vector(values, p.shape(), DType::F64));
      const double up = model.loss(ids, targets).item();
      values[static_cast<size_t>(i)] = original - eps;
      p.copy_(Tensor::from_vector(values, p.shape(), DType::F64));
      const double down = model.loss(ids, targets).item();
      values[static_cast<size_t>(i)] = original;
      p.copy_(Tensor::from_vector(values, p.shape(), DType::F64));
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(g[static_cast<size_t>(i)], numeric, 1e-6 + 1e-5 * std::abs(numeric)) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(GPT, LearnsASequence) {
  GPT model(GPTConfig{.vocab = 16, .block_size = 16, .layers = 2, .heads = 2, .channels = 32}, 3);
  AdamW opt(model.parameters(), AdamW::Options{.lr = 3e-3, .weight_decay = 0.0});
  const Tensor ids = cyclic_ids(8, 16, 16, 0), targets = cyclic_ids(8, 16, 16, 1);
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    opt.zero_grad();
    Tensor loss = model.loss(ids, targets);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_NEAR(first, std::log(16.0), 0.2);
  EXPECT_LT(last, 0.3 * first) << "loss " << first << " -> " << last;
}

}  // namespace
}  // namespace ft
