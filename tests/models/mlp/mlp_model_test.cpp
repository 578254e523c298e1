// MlpModel (models/mlp/mlp_model.h) against the plain Sequential of Linear and
// LayerNormActDropout layers it replaced: the same parameter names, order and values
// (checkpoints load either way), and in training mode, on every device and in both kernel modes,
// the same output, gradients and Philox offsets taken, so forward_after draws the dropout masks
// the two forwards did.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/random/random.h"
#include "lib/ops/reduce/reduce.h"
#include "models/mlp/mlp_model.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

/// The model as built before MlpModel: the same layers in the same order, the same draws.
std::shared_ptr<Sequential> plain_mlp(int64_t hidden, int64_t layers, double dropout_p, uint64_t seed) {
  Generator gen(seed);
  auto model = std::make_shared<Sequential>();
  int64_t in = 784;
  for (int64_t i = 0; i < layers; ++i) {
    model->push_back(std::make_shared<Linear>(Linear::Options{.in = in, .out = hidden}, gen));
    model->push_back(std::make_shared<LayerNormActDropout>(hidden, Activation::GELU, dropout_p,
                                                           seed + 1000 + static_cast<uint64_t>(i)));
    in = hidden;
  }
  model->push_back(std::make_shared<Linear>(Linear::Options{.in = in, .out = 10}, gen));
  return model;
}

TEST(MlpModelTest, ParametersAreThePlainSequentials) {
  const auto model = cli::build_mlp(32, 2, 0.1, 3), plain = plain_mlp(32, 2, 0.1, 3);
  const auto mine = model->named_parameters(), theirs = plain->named_parameters();
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(mine[i].first, theirs[i].first);
    EXPECT_TRUE(all_equal(mine[i].second, theirs[i].second)) << mine[i].first;
  }
}

TEST(MlpModelTest, TrainsAsThePlainSequential) {
  std::vector<Device> devices{kCPU};
  if (cuda_available()) devices.push_back(kCUDA);
  for (Device device : devices)
    for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
      SCOPED_TRACE(device.str() + (mode == KernelMode::Fused ? " fused" : " unfused"));
      KernelModeGuard guard(mode);
      const DType dtype = device == kCPU ? DType::F32 : DType::BF16;
      Generator gen = test_generator();
      const Tensor x = random_tensor({64, 784}, dtype, device, gen);
      struct Run {
        Tensor y;
        std::vector<Tensor> grads;
        uint64_t counter = 0;
      };
      auto run = [&](const std::shared_ptr<Sequential>& model) {
        model->to(device, dtype);
        model->train();
        PhiloxCounter::on(device).set(40);
        Run r;
        r.y = model->forward(x);
        sum_all(cast(r.y, DType::F32)).backward();
        for (const auto& [name, p] : model->named_parameters()) r.grads.push_back(p.grad());
        r.counter = PhiloxCounter::on(device).value();
        return r;
      };
      const Run mine = run(cli::build_mlp(64, 2, 0.2, 5)), theirs = run(plain_mlp(64, 2, 0.2, 5));
      EXPECT_EQ(mine.counter, theirs.counter) << "Philox offsets taken";
      EXPECT_TRUE(all_equal(mine.y, theirs.y));
      ASSERT_EQ(mine.grads.size(), theirs.grads.size());
      // The forward runs the same kernels; the fused backward sums the hidden biases' gradients
      // in the norm kernel instead of cuBLASLt's BGRADB, so those may differ in rounding.
      for (size_t i = 0; i < mine.grads.size(); ++i)
        EXPECT_TRUE(all_close(mine.grads[i], theirs.grads[i], grad_tolerance(dtype), 0.0)) << "gradient " << i;
    }
}

}  // namespace
}  // namespace ft
