// The optimizers on flat storage: frozen parameters get no gradient and no state, the master
// weights line up element for element with the gradient buffer (so a range is a shard of
// both), and gradients accumulated over micro-batches give the update of one large batch.
#include <gtest/gtest.h>

#include <cstring>

#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/runtime.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using test::all_equal;
using test::random_tensor;
using test::test_generator;

struct TinyModel {
  Tensor w1, b1, w2, frozen;  // frozen: a bias that takes part in forward but is not trained
};

TinyModel tiny_model(Generator& gen, DType dtype, Device device) {
  TinyModel m;
  m.w1 = test::fresh_leaf(random_tensor({5, 7}, DType::F64, kCPU, gen) * 0.5, dtype, device);
  m.b1 = test::fresh_leaf(random_tensor({7}, DType::F64, kCPU, gen), dtype, device);
  m.w2 = test::fresh_leaf(random_tensor({7, 3}, DType::F64, kCPU, gen) * 0.5, dtype, device);
  m.frozen = test::fresh_copy(random_tensor({3}, DType::F64, kCPU, gen), dtype, device);
  return m;
}

// Mean squared error over the rows of x against y: a mean, so micro-batch losses scaled by
// 1/count add up to the large batch's.
Tensor tiny_loss(const TinyModel& m, const Tensor& x, const Tensor& y) {
  const Tensor h = tanh(matmul(x, m.w1) + m.b1);
  const Tensor d = matmul(h, m.w2) + m.frozen - y;
  return sum_all(d * d) * (1.0 / static_cast<double>(d.numel()));
}

void expect_frozen_untouched(Device device, DType dtype, KernelMode mode, bool sgd) {
  KernelModeGuard guard(mode);
  Generator gen = test_generator(static_cast<uint64_t>(sgd));
  TinyModel m = tiny_model(gen, dtype, device);
  const Tensor frozen_before = test::fresh_copy(m.frozen, dtype, kCPU);  // a copy, also on the CPU
  std::unique_ptr<Optimizer> opt;
  const std::vector<Tensor> all{m.w1, m.b1, m.w2, m.frozen};
  if (sgd) opt = std::make_unique<SGD>(all, SGD::Options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  else opt = std::make_unique<AdamW>(all, AdamW::Options{.lr = 0.05, .weight_decay = 0.1});
  ASSERT_EQ(opt->params().size(), 3u) << "the frozen tensor must be left out";
  EXPECT_EQ(opt->store().grads().leaves().size(), 3u);
  const Tensor w1_before = test::fresh_copy(m.w1, dtype, kCPU);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = random_tensor({8, 5}, dtype, device, gen), y = random_tensor({8, 3}, dtype, device, gen);
    opt->zero_grad();
    tiny_loss(m, x, y).backward();
    opt->step();
  }
  EXPECT_FALSE(m.frozen.grad().defined());
  EXPECT_TRUE(all_equal(m.frozen.to(kCPU), frozen_before)) << "a frozen parameter changed";
  EXPECT_FALSE(all_equal(m.w1.to(kCPU), w1_before)) << "the trainable ones must move";
  if (!sgd) {
    const auto state = static_cast<AdamW&>(*opt).state();
    EXPECT_EQ(state.count("3.m"), 0u) << "no state for a frozen parameter";
    EXPECT_EQ(state.count("2.m"), 1u);
  }
  // One flat buffer of gradients, master weights (and moments) of the three trainable ones.
  int64_t trainable = 0;
  for (const Tensor& p : opt->params()) trainable += p.numel();
  EXPECT_GE(opt->store().grads().flat(0).numel(), trainable);
  EXPECT_LT(opt->store().grads().flat(0).numel(), trainable + 3 * FlatLayout::kAlign);
}

TEST(FrozenParameter, GetsNoGradientNoStateAndStaysBitIdenticalCpu) {
  expect_frozen_untouched(kCPU, DType::F32, KernelMode::Fused, false);
  expect_frozen_untouched(kCPU, DType::F64, KernelMode::Fused, true);
}

TEST(FrozenParameter, GetsNoGradientNoStateAndStaysBitIdenticalCuda) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    expect_frozen_untouched(kCUDA, DType::BF16, mode, false);
    expect_frozen_untouched(kCUDA, DType::BF16, mode, true);
  }
}

TEST(FlatState, MasterWeightsLineUpWithTheGradientBuffer) {
  Generator gen = test_generator();
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    for (DType dtype : {DType::F32, DType::BF16}) {
      TinyModel m = tiny_model(gen, dtype, device);
      const Tensor w2_values = test::fresh_copy(m.w2, dtype, kCPU);
      AdamW opt({m.w1, m.b1, m.w2}, AdamW::Options{});
      const GradBuffer& grads = opt.store().grads();
      ASSERT_EQ(opt.store().replica_buffers().size(), 1u);
      const char* grad_base = static_cast<const char*>(grads.flat(0).data_ptr());
      const char* master_base = static_cast<const char*>(opt.store().replica_buffers()[0].data_ptr());
      for (size_t i = 0; i < opt.params().size(); ++i) {
        const int64_t offset = grads.layout().slot(i).offset;
        EXPECT_EQ(static_cast<const char*>(grads.grad(i).data_ptr()) - grad_base, offset * 4);
        if (dtype == DType::F32) {  // the parameter is its own master: it lives in the master buffer
          EXPECT_EQ(static_cast<const char*>(opt.params()[i].data_ptr()) - master_base, offset * 4);
        }
      }
      EXPECT_TRUE(all_equal(m.w2.to(kCPU), w2_values)) << "moving into the master buffer keeps the values";
    }
  }
}

// Small buckets are grown until a step has at most max_buckets of them, each a multiple of
// kAlign · world elements, covering every gradient element once.
TEST(FlatState, BucketsGrowToTheirMaximumCount) {
  Generator gen = test_generator();
  const std::vector<Tensor> params{random_tensor({300, 70}, DType::F32, kCPU, gen).requires_grad_(true),
                                   random_tensor({513}, DType::F32, kCPU, gen).requires_grad_(true)};
  for (int64_t max_buckets : {1, 3, 64}) {
    SCOPED_TRACE(max_buckets);
    const ParameterStore store(params, DataPartition{.rank = 1, .world = 2, .bucket_bytes = 512 * 4,
                                                     .max_buckets = max_buckets});
    const int64_t total = store.grads().layout().groups()[0].size;
    EXPECT_LE(static_cast<int64_t>(store.buckets().size()), max_buckets);
    EXPECT_EQ(static_cast<int64_t>(store.buckets().size()),
              std::min<int64_t>(max_buckets, (total + 511) / 512)) << "as small as allowed";
    int64_t covered = 0;
    for (const FlatLayout::Bucket& b : store.buckets()) {
      EXPECT_EQ(b.size() % (2 * FlatLayout::kAlign), 0);
      covered += b.size();
    }
    EXPECT_EQ(covered, total);
  }
}

// Four micro-batches of B rows, each loss scaled by 1/4 and backward into the same gradients,
// then one step: the same update as one batch of 4B rows (CPU, f64).
TEST(GradientAccumulation, FourMicroBatchesEqualOneBatchOfFourTimesTheRows) {
  for (bool sgd : {false, true}) {
    Generator gen = test_generator(sgd);
    Generator init_a = test_generator(100), init_b = test_generator(100);
    TinyModel a = tiny_model(init_a, DType::F64, kCPU), b = tiny_model(init_b, DType::F64, kCPU);
    auto make = [sgd](const TinyModel& m) -> std::unique_ptr<Optimizer> {
      const std::vector<Tensor> params{m.w1, m.b1, m.w2};
      if (sgd) return std::make_unique<SGD>(params, SGD::Options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
      return std::make_unique<AdamW>(params, AdamW::Options{.lr = 0.01, .weight_decay = 0.1,
                                                            .policy = {.max_grad_norm = 0.5}});
    };
    auto opt_a = make(a), opt_b = make(b);
    for (int step = 0; step < 3; ++step) {
      const Tensor x = random_tensor({16, 5}, DType::F64, kCPU, gen), y = random_tensor({16, 3}, DType::F64, kCPU, gen);
      opt_a->zero_grad();
      for (int micro = 0; micro < 4; ++micro)
        (tiny_loss(a, x.narrow(0, 4 * micro, 4), y.narrow(0, 4 * micro, 4)) * 0.25).backward();
      opt_a->step();
      opt_b->zero_grad();
      tiny_loss(b, x, y).backward();
      opt_b->step();
    }
    const std::vector<std::pair<Tensor, Tensor>> pairs{{a.w1, b.w1}, {a.b1, b.b1}, {a.w2, b.w2}};
    for (const auto& [pa, pb] : pairs)
      EXPECT_TRUE(test::all_close(pa, pb, 1e-12)) << (sgd ? "SGD" : "AdamW");
  }
}

}  // namespace
}  // namespace ft
