// GraphedStep: steps replayed from a captured CUDA graph against the same steps run eagerly.
// The captured kernels read the batch, the learning rate, the step counts and the dropout
// offsets from device memory, so N replays must give the losses and parameters of N eager steps
// bit for bit (every kernel of the step is deterministic). Also: a batch of another shape runs
// eagerly, two micro-batches per step (accumulation inside the graph) match too, and on the CPU
// nothing is captured.
#include <gtest/gtest.h>

#include <vector>

#include "layers/activation.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/sequential.h"
#include "lib/kernel_mode.h"
#include "lib/ops/cross_entropy/cross_entropy.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/random/random.h"
#include "lib/runtime.h"
#include "optim/adamw.h"
#include "tests/lib/test_util.h"
#include "train/data/batch.h"
#include "train/loop/graphed_step.h"

namespace ft {
namespace {

using namespace ft::test;

struct RunResult {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  bool replayed = false;
};

// A small MLP with every kind of op the mlp workload has (the fused linear, LayerNorm, GELU,
// dropout, cross-entropy) and AdamW with clipping, trained `steps` steps on fresh random batches
// of `micro` micro-batches each. With `graph` the steps go through GraphedStep, else through the
// same training_step eagerly.
// With `lr_in_graph` the learning rate is one of the replay's device writes
// (Optimizer::set_lr_deferred, as the Trainer does), else a fill before each step.
RunResult train(Device device, bool graph, int64_t steps, int64_t odd_batch_at = -1, int64_t micro = 1,
                bool lr_in_graph = false) {
  PhiloxCounter::on(device).set(0);
  Generator gen(11);
  Sequential model;
  model.push_back(std::make_shared<Linear>(Linear::Options{.in = 48, .out = 64}, gen));
  model.push_back(std::make_shared<LayerNorm>(64));
  model.push_back(std::make_shared<GELU>());
  model.push_back(std::make_shared<Dropout>(0.2, 5));
  model.push_back(std::make_shared<Linear>(Linear::Options{.in = 64, .out = 10}, gen));
  const DType dtype = device.is_cuda() ? DType::BF16 : DType::F32;
  model.to(device, dtype);
  AdamW optimizer(model.parameters(), AdamW::Options{.lr = 3e-3, .weight_decay = 0.1,
                                                     .policy = {.max_grad_norm = 1.0}});
  const StepFn one_step = training_step(model, optimizer, [dtype](Module& m, const Batch& b) {
    return cross_entropy(m.forward(cast(b.at("x"), dtype)), b.at("y"));
  });
  GraphedStep graphed(one_step);
  Generator data(23);
  RunResult r;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t rows = s == odd_batch_at ? 24 : 32;
    std::vector<Batch> batches;
    for (int64_t i = 0; i < micro; ++i)
      batches.push_back({{"x", Tensor::randn({rows, 48}, data, DType::F32, kCPU).to(device)},
                         {"y", random_ids({rows}, 10, DType::I64, kCPU, data).to(device)}});
    const double lr = 3e-3 * (1.0 - 0.05 * static_cast<double>(s));  // changes every step
    Tensor loss;
    if (graph && lr_in_graph) {
      loss = graphed.run(batches, {optimizer.set_lr_deferred(lr)});
    } else {
      optimizer.set_lr(lr);
      loss = graph ? graphed.run(batches) : one_step(batches);
    }
    r.losses.push_back(loss.item());
  }
  r.replayed = graphed.replaying();
  for (const Tensor& p : model.parameters()) r.params.push_back(p.to_vector());
  return r;
}

TEST(GraphedStepTest, ReplaysMatchEagerStepsBitForBit) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    SCOPED_TRACE(kernel_mode_name(mode));
    KernelModeGuard guard(mode);
    const RunResult eager = train(kCUDA, false, 8), replayed = train(kCUDA, true, 8);
    EXPECT_TRUE(replayed.replayed) << "the step was not captured";
    EXPECT_EQ(replayed.losses, eager.losses);
    EXPECT_EQ(replayed.params, eager.params);
    // The losses move: a graph that replayed stale inputs or a fixed learning rate would not
    // match the eager run, and a run that learned nothing would not show it.
    EXPECT_NE(eager.losses.front(), eager.losses.back());
  }
}

TEST(GraphedStepTest, TheLearningRateAsAReplayWriteMatchesEagerSteps) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard guard(KernelMode::Fused);
  // The odd batch at step 5 runs eagerly after the capture: the write must happen there too.
  const RunResult eager = train(kCUDA, false, 8, 5), replayed = train(kCUDA, true, 8, 5, 1, true);
  EXPECT_TRUE(replayed.replayed);
  EXPECT_EQ(replayed.losses, eager.losses);
  EXPECT_EQ(replayed.params, eager.params);
}

TEST(GraphedStepTest, AnotherBatchShapeRunsEagerlyAndStillMatches) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard guard(KernelMode::Fused);
  const RunResult eager = train(kCUDA, false, 7, 5), replayed = train(kCUDA, true, 7, 5);
  EXPECT_TRUE(replayed.replayed);
  EXPECT_EQ(replayed.losses, eager.losses);
  EXPECT_EQ(replayed.params, eager.params);
}

TEST(GraphedStepTest, AccumulatedMicroBatchesReplayAndMatch) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard guard(KernelMode::Fused);
  const RunResult eager = train(kCUDA, false, 6, -1, 2), replayed = train(kCUDA, true, 6, -1, 2);
  EXPECT_TRUE(replayed.replayed);
  EXPECT_EQ(replayed.losses, eager.losses);
  EXPECT_EQ(replayed.params, eager.params);
}

TEST(GraphedStepTest, OnTheCpuItRunsEagerly) {
  const RunResult eager = train(kCPU, false, 4), graphed = train(kCPU, true, 4);
  EXPECT_FALSE(graphed.replayed);
  EXPECT_EQ(graphed.losses, eager.losses);
  EXPECT_EQ(graphed.params, eager.params);
}

}  // namespace
}  // namespace ft
