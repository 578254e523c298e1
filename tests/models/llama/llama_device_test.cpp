// The Llama model on CUDA against the same model on the CPU in f64, at the size of
// tests/parity/llama_parity.py's model (HS 32, 8 query and 2 key/value heads, V 3000, T 128):
// every parameter's gradient in f32, in both kernel modes, and the ops it is made of at those
// sizes. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/runtime.h"
#include "lib/ops/attention/attention.h"
#include "lib/ops/linear_cross_entropy/linear_cross_entropy.h"
#include "lib/ops/norm/rms_norm.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/ops/elementwise/elementwise.h"
#include "models/llama/llama.h"
#include "optim/adamw.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

double relative(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(kCPU).to(DType::F64).to_vector(), y = b.to(kCPU).to(DType::F64).to_vector();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) diff += (x[i] - y[i]) * (x[i] - y[i]), norm += y[i] * y[i];
  return std::sqrt(diff / std::max(norm, 1e-300));
}

TEST(LlamaCuda, GradientsMatchTheCpuInF64) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const LlamaConfig c{.vocab = 3000, .hidden = 256, .intermediate = 688, .layers = 2, .heads = 8, .kv_heads = 2,
                      .head_dim = 0, .max_positions = 256, .rms_eps = 1e-5,
                      .rope = {.theta = 500000.0, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                               .original_max_position = 64}};
  std::mt19937 rng(3);
  std::vector<double> ids(4 * 128), targets(ids.size());
  for (double& x : ids) x = rng() % 3000;
  for (double& x : targets) x = rng() % 3000;
  const Tensor id_tensor = Tensor::from_vector(ids, {4, 128}, DType::I64);
  const Tensor target_tensor = Tensor::from_vector(targets, {4, 128}, DType::I64);
  Llama reference(c, 7);
  reference.to(kCPU, DType::F64);
  const double reference_loss = reference.loss(id_tensor, target_tensor).item();
  reference.loss(id_tensor, target_tensor).backward();
  const KernelMode saved = kernel_mode();
  for (const KernelMode mode : {KernelMode::Unfused, KernelMode::Fused}) {
    SCOPED_TRACE(kernel_mode_name(mode));
    set_kernel_mode(mode);
    Llama model(c, 7);
    model.to(kCUDA, DType::F32);
    // As ft-llama-parity runs it: the gradients land in the optimizer's flat buffers.
    AdamW optimizer(model.parameters(), {.lr = 1e-3, .beta2 = 0.95, .weight_decay = 0.0});
    optimizer.zero_grad();
    const Tensor loss = model.loss(id_tensor.to(kCUDA), target_tensor.to(kCUDA));
    loss.backward();
    EXPECT_NEAR(loss.item(), reference_loss, 1e-4 * reference_loss);
    const auto expected = reference.named_parameters();
    const auto got = model.named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = relative(got[i].second.grad(), expected[i].second.grad());
      std::printf("%s %s: %.2e\n", kernel_mode_name(mode), got[i].first.c_str(), err);
      EXPECT_LT(err, 2e-3) << got[i].first;
    }
  }
  set_kernel_mode(saved);
}

/// f(inputs) on CUDA in f32 and on the CPU in f64, backward from the same random weights: the
/// worst relative error over the output and every input's gradient.
double device_error(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs) {
  Generator gen(5);
  double worst = 0;
  std::vector<Tensor> grads[2];
  Tensor outs[2];
  for (int run = 0; run < 2; ++run) {
    const Device device = run ? kCUDA : kCPU;
    const DType dtype = run ? DType::F32 : DType::F64;
    std::vector<Tensor> leaves;
    for (const Tensor& x : inputs)
      leaves.push_back(is_floating(x.dtype()) ? x.to(dtype).to(device).detach().requires_grad_(true) : x.to(device));
    outs[run] = f(leaves);
    Generator weights(9);
    const Tensor w = Tensor::randn(outs[run].shape(), weights, dtype, device);
    sum_all(outs[run] * w).backward();
    for (const Tensor& l : leaves) grads[run].push_back(l.requires_grad() ? l.grad() : Tensor());
  }
  worst = relative(outs[1], outs[0]);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (grads[0][i].defined()) worst = std::max(worst, relative(grads[1][i], grads[0][i]));
  return worst;
}

TEST(LlamaCuda, ItsOpsAtTheParitySizes) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  Generator gen(4);
  const KernelMode saved = kernel_mode();
  for (const KernelMode mode : {KernelMode::Unfused, KernelMode::Fused}) {
    set_kernel_mode(mode);
    std::vector<double> t(512);
    std::mt19937 rng(1);
    for (double& x : t) x = rng() % 3000;
    const Tensor targets = Tensor::from_vector(t, {512}, DType::I64);
    const double lce = device_error([&](const std::vector<Tensor>& in) {
      return linear_cross_entropy(in[0], in[1], in[2]).reshape({1});
    }, {Tensor::randn({512, 256}, gen, DType::F64), Tensor::randn({3000, 256}, gen, DType::F64) * 0.02, targets});
    const double rope32 = device_error([](const std::vector<Tensor>& in) {
      return rope(in[0], RopeConfig{.theta = 500000.0, .factor = 8.0, .original_max_position = 64});
    }, {Tensor::randn({4, 128, 8, 32}, gen, DType::F64)});
    const double attn = device_error([](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], true); },
                                     {Tensor::randn({4, 8, 128, 32}, gen, DType::F64), Tensor::randn({4, 8, 128, 32}, gen, DType::F64),
                                      Tensor::randn({4, 8, 128, 32}, gen, DType::F64)});
    const double norm = device_error([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); },
                                     {Tensor::randn({4, 128, 256}, gen, DType::F64), Tensor::randn({256}, gen, DType::F64)});
    std::printf("%s: linear_cross_entropy %.2e, rope %.2e, attention %.2e, rms_norm %.2e\n", kernel_mode_name(mode),
                lce, rope32, attn, norm);
    EXPECT_LT(lce, 1e-4);
    EXPECT_LT(rope32, 1e-5);
    EXPECT_LT(attn, 1e-4);
    EXPECT_LT(norm, 1e-4);
  }
  set_kernel_mode(saved);
}

}  // namespace
}  // namespace ft
