// DataParallel in one process (world size 1: Gloo on the CPU, NCCL on a GPU): the bucket
// reductions start while backward still runs (the recorded order of events), and ZeRO-1's
// sharded step (pieces of buckets, compact state, norm summed over ranks, parameters gathered)
// gives exactly the plain step's parameters and state. The 2- and 4-process equivalences are
// the dp_* ctests (tests/train/distributed/dp_equivalence_check.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/reduce/reduce.h"
#include "optim/adamw.h"
#include "tests/lib/test_util.h"
#include "tests/train/distributed/one_rank.h"
#include "train/distributed/data_parallel.h"

namespace ft {
namespace {

using test::OneRank;
using test::random_tensor;
using test::test_generator;

// Three layers: with buckets of one 64×64 layer, the last layer's bucket is complete long before
// backward reaches the first.
struct ThreeLayers {
  std::vector<Tensor> weights;
  ThreeLayers(Generator& gen, DType dtype, Device device) {
    for (const Shape& shape : {Shape{32, 64}, Shape{64, 64}, Shape{64, 64}, Shape{64, 8}}) {
      Tensor w = (random_tensor(shape, DType::F32, kCPU, gen) * 0.2).to(dtype).to(device);
      w.requires_grad_(true);
      weights.push_back(w);
    }
  }
  ThreeLayers() = default;
  /// Another model with the same weights in their own storage.
  ThreeLayers copy() const {
    ThreeLayers out;
    for (const Tensor& w : weights) {
      Tensor c = Tensor::empty(w.shape(), w.dtype(), w.device());
      c.copy_(w.detach());
      c.requires_grad_(true);
      out.weights.push_back(c);
    }
    return out;
  }
  Tensor loss(const Tensor& x) const {
    Tensor h = x;
    for (size_t i = 0; i < weights.size(); ++i) {
      h = matmul(h, weights[i]);
      if (i + 1 < weights.size()) h = relu(h);
    }
    return sum_all(cast(h * h, DType::F32)) * (1.0 / static_cast<double>(h.numel()));
  }
};

class DataParallelTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    FT_SKIP_UNLESS_AVAILABLE(GetParam());
#ifndef FT_TEST_HAVE_GLOO
    if (!GetParam().is_cuda()) GTEST_SKIP() << "built without Gloo";
#endif
  }
  DType dtype() const { return GetParam().is_cuda() ? DType::BF16 : DType::F32; }
};

void train_step(ThreeLayers& model, Optimizer& optimizer, DataParallel* dp, const Tensor& x) {
  optimizer.zero_grad();
  const Tensor loss = model.loss(x);
  if (dp) dp->before_backward(true);
  loss.backward();
  if (dp) dp->after_backward();
  optimizer.step();
}

TEST_P(DataParallelTest, BucketsStartBeforeBackwardEnds) {
  const Device device = GetParam();
  Generator gen = test_generator();
  ThreeLayers model(gen, dtype(), device);
  // One 64×64 f32 layer a bucket: 16 KB.
  AdamW optimizer(model.weights, AdamW::Options{.partition = DataPartition{.bucket_bytes = 64 * 64 * 4}});
  ASSERT_GE(optimizer.store().buckets().size(), 3u);
  OneRank rank(device);
  DataParallel dp(*rank.comm, optimizer, DataParallel::Options{.trace = true});
  const Tensor x = random_tensor({16, 32}, DType::F32, kCPU, gen).to(dtype()).to(device);
  train_step(model, optimizer, &dp, x);
  const std::vector<std::string>& trace = dp.trace();
  auto at = [&](const std::string& event) {
    auto it = std::find(trace.begin(), trace.end(), event);
    EXPECT_NE(it, trace.end()) << "no event '" << event << "'";
    return it - trace.begin();
  };
  std::string order;
  for (const std::string& e : trace) order += e + "; ";
  // The first bucket (the end of the buffer: the last layer) starts before the first layer's
  // gradient exists, which backward computes last.
  EXPECT_LT(at("start 0"), at("ready 0")) << order;
  EXPECT_LT(at("start 0"), at("backward done")) << order;
  EXPECT_LT(at("ready 3"), at("start 0")) << order;
  for (size_t b = 0; b < optimizer.store().buckets().size(); ++b) at("start " + std::to_string(b));
}

// DataParallel removes only its own gradient-ready hooks when it goes: a hook the user put on
// a parameter keeps firing after the wrapper is gone (its destructor used to clear them all).
TEST_P(DataParallelTest, ItsDestructorLeavesOtherHooks) {
  const Device device = GetParam();
  Generator gen = test_generator(3);
  ThreeLayers model(gen, dtype(), device);
  AdamW optimizer(model.weights, AdamW::Options{});
  int user_calls = 0;
  add_grad_ready_hook(model.weights[1], [&] { ++user_calls; });
  const Tensor x = random_tensor({16, 32}, DType::F32, kCPU, gen).to(dtype()).to(device);
  {
    OneRank rank(device);
    DataParallel dp(*rank.comm, optimizer, DataParallel::Options{.trace = true});
    train_step(model, optimizer, &dp, x);
    EXPECT_EQ(user_calls, 1);
    EXPECT_FALSE(dp.trace().empty());
  }
  train_step(model, optimizer, nullptr, x);  // no wrapper: its hooks must be gone, the user's not
  EXPECT_EQ(user_calls, 2);
}

TEST_P(DataParallelTest, OnlyTheLastMicroBatchReduces) {
  const Device device = GetParam();
  Generator gen = test_generator(2);
  ThreeLayers model(gen, dtype(), device);
  AdamW optimizer(model.weights, AdamW::Options{.partition = DataPartition{.bucket_bytes = 64 * 64 * 4}});
  OneRank rank(device);
  DataParallel dp(*rank.comm, optimizer, DataParallel::Options{.trace = true});
  optimizer.zero_grad();
  for (int micro = 0; micro < 3; ++micro) {
    const Tensor x = random_tensor({16, 32}, DType::F32, kCPU, gen).to(dtype()).to(device);
    const Tensor loss = model.loss(x);
    dp.before_backward(micro == 2);
    loss.backward();
    // The micro-batches before the last start nothing (trace() is the last reducing backward's).
    if (micro < 2) {
      EXPECT_TRUE(dp.trace().empty()) << "micro-batch " << micro;
    }
  }
  dp.after_backward();
  const std::vector<std::string>& trace = dp.trace();
  const auto starts = std::count_if(trace.begin(), trace.end(), [](const std::string& e) { return e.rfind("start", 0) == 0; });
  EXPECT_EQ(static_cast<size_t>(starts), optimizer.store().buckets().size());
  EXPECT_THROW(dp.after_backward(), Error);  // not armed again without before_backward(true)
}

TEST_P(DataParallelTest, ZeroOneMatchesThePlainStepExactly) {
  const Device device = GetParam();
  Generator gen = test_generator();
  ThreeLayers plain_model(gen, dtype(), device), zero_model = plain_model.copy();
  const AdamW::Options options{.lr = 1e-2, .weight_decay = 0.1, .policy = StepPolicy{.max_grad_norm = 0.5}};
  AdamW plain(plain_model.weights, options);
  AdamW::Options zero_options = options;
  zero_options.partition = DataPartition{.bucket_bytes = 5000, .shard_state = true};  // buckets split layers
  AdamW zero(zero_model.weights, zero_options);
  ASSERT_TRUE(zero.sharded());
  OneRank rank(device);
  DataParallel dp(*rank.comm, zero, DataParallel::Options{});
  for (int step = 0; step < 4; ++step) {
    const Tensor x = random_tensor({16, 32}, DType::F32, kCPU, gen).to(dtype()).to(device);
    train_step(plain_model, plain, nullptr, x);
    train_step(zero_model, zero, &dp, x);
  }
  // The clip factor comes from a norm summed in another order: equal within rounding.
  const std::map<std::string, Tensor> a = plain.state(), b = zero.state();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const std::vector<double> x = tensor.to(kCPU).to_vector(), y = b.at(name).to(kCPU).to_vector();
    ASSERT_EQ(x.size(), y.size()) << name;
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < x.size(); ++i) {
      worst = std::max(worst, std::abs(x[i] - y[i]));
      scale = std::max(scale, std::abs(x[i]));
    }
    EXPECT_LE(worst / scale, 1e-5) << name;
  }
  for (size_t i = 0; i < plain_model.weights.size(); ++i) {
    const std::vector<double> x = plain_model.weights[i].to(kCPU).to_vector();
    const std::vector<double> y = zero_model.weights[i].to(kCPU).to_vector();
    double worst = 0;
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]));
    EXPECT_LE(worst, dtype() == DType::BF16 ? 1e-2 * 0.05 : 1e-6) << "weight " << i;
  }
}

TEST_P(DataParallelTest, WithoutClippingZeroOneIsBitIdentical) {
  const Device device = GetParam();
  Generator gen = test_generator(1);
  ThreeLayers plain_model(gen, dtype(), device), zero_model = plain_model.copy();
  AdamW plain(plain_model.weights, AdamW::Options{.lr = 1e-2});
  AdamW zero(zero_model.weights,
             AdamW::Options{.lr = 1e-2, .partition = DataPartition{.bucket_bytes = 3000, .shard_state = true}});
  OneRank rank(device);
  DataParallel dp(*rank.comm, zero, DataParallel::Options{});
  for (int step = 0; step < 3; ++step) {
    const Tensor x = random_tensor({16, 32}, DType::F32, kCPU, gen).to(dtype()).to(device);
    train_step(plain_model, plain, nullptr, x);
    train_step(zero_model, zero, &dp, x);
  }
  for (size_t i = 0; i < plain_model.weights.size(); ++i)
    EXPECT_EQ(plain_model.weights[i].to(kCPU).to_vector(), zero_model.weights[i].to(kCPU).to_vector()) << "weight " << i;
  const std::map<std::string, Tensor> a = plain.state(), b = zero.state();
  for (const auto& [name, tensor] : a) EXPECT_EQ(tensor.to(kCPU).to_vector(), b.at(name).to(kCPU).to_vector()) << name;
}

// max |a - b| over max |a|, on the host.
double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(kCPU).to_vector(), y = b.to(kCPU).to_vector();
  double worst = 0, scale = 1e-30;
  for (size_t k = 0; k < x.size(); ++k) {
    worst = std::max(worst, std::abs(x[k] - y[k]));
    scale = std::max(scale, std::abs(x[k]));
  }
  return worst / scale;
}

// ZeRO-2 in one rank: each gradient moves into its bucket's staging slot as it completes and the
// buckets reduce into the gradient shards, so no flat gradient buffer exists and each parameter's
// own gradient is released after the step's backward. A parameter the loss never reads sits in
// the middle of the layout: its buckets complete only after backward, so the buckets after them
// wait for their slots with gradients queued. On the CPU the reduced gradients and the update
// equal the plain run's bit for bit, with one micro-batch a step and with two (the first one's
// gradients accumulating in the parameters' own). On CUDA backward leaves the parameters' own
// gradients in their dtype, bf16, where the plain step's matmuls write theirs into the f32
// buffer's views unrounded (as FSDP2's are bf16 with bf16 parameters): there the gradients
// agree within bf16 rounding, 8e-3 of their scale, and Adam's steps, which sign flips of tiny
// gradients swing by a whole step, are left unchecked.
TEST_P(DataParallelTest, ZeroTwoMatchesThePlainStepWithoutAGradientBuffer) {
  const Device device = GetParam();
  for (const int micro_batches : {1, 2}) {
    SCOPED_TRACE(std::to_string(micro_batches) + " micro-batches");
    const bool exact = !device.is_cuda();
    Generator gen = test_generator(4);
    ThreeLayers plain_model(gen, dtype(), device), zero_model = plain_model.copy();
    const Tensor unused_values = (random_tensor({64, 64}, DType::F32, kCPU, gen) * 0.2).to(dtype());
    auto with_unused = [&](const ThreeLayers& m) {
      Tensor unused = Tensor::empty(unused_values.shape(), unused_values.dtype(), device);
      unused.copy_(unused_values);
      unused.requires_grad_(true);
      std::vector<Tensor> params = m.weights;
      params.insert(params.begin() + 2, unused);
      return params;
    };
    AdamW plain(with_unused(plain_model), AdamW::Options{.lr = 1e-2});
    AdamW zero(with_unused(zero_model), AdamW::Options{.lr = 1e-2, .partition = DataPartition{.bucket_bytes = 3000,
                                                                                              .shard_state = true,
                                                                                              .shard_grads = true}});
    ASSERT_FALSE(zero.store().grads().has_storage());
    ASSERT_GE(zero.store().buckets().size(), 6u);
    OneRank rank(device);
    DataParallel dp(*rank.comm, zero, DataParallel::Options{.trace = true});
    for (int step = 0; step < 3; ++step) {
      const Tensor x = random_tensor({32, 32}, DType::F32, kCPU, gen).to(dtype()).to(device);
      for (auto [model, optimizer, sync] : {std::tuple<ThreeLayers*, Optimizer*, DataParallel*>{&plain_model, &plain, nullptr},
                                            {&zero_model, &zero, &dp}}) {
        optimizer->zero_grad();
        const int64_t rows = 32 / micro_batches;
        for (int micro = 0; micro < micro_batches; ++micro) {
          const Tensor loss = model->loss(x.narrow(0, rows * micro, rows)) * (1.0 / micro_batches);
          if (sync) sync->before_backward(micro == micro_batches - 1);
          loss.backward();
        }
        if (sync) sync->after_backward();
      }
      // At world size 1 a shard is its whole group, in the flat buffer's layout.
      for (size_t g = 0; g < plain.store().grads().groups(); ++g) {
        const Tensor& whole = plain.store().grads().flat(g);
        const Tensor& shard = zero.store().gradient_shards().at(g);
        if (exact) {
          EXPECT_EQ(whole.to(kCPU).to_vector(), shard.to(kCPU).to_vector()) << "step " << step << " group " << g;
        } else if (step == 0) {
          EXPECT_LE(relative_difference(whole, shard), 8e-3) << "group " << g;
        }
      }
      plain.step();
      zero.step();
      for (const Tensor& w : zero.params()) EXPECT_FALSE(w.grad().defined()) << "a gradient was kept";
    }
    const std::vector<std::string>& trace = dp.trace();
    EXPECT_LT(std::find(trace.begin(), trace.end(), "start 0") - trace.begin(),
              std::find(trace.begin(), trace.end(), "backward done") - trace.begin());
    if (!exact) continue;
    const std::map<std::string, Tensor> a = plain.state(), b = zero.state();
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, tensor] : a) EXPECT_EQ(tensor.to(kCPU).to_vector(), b.at(name).to(kCPU).to_vector()) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DataParallelTest, ::testing::Values(kCPU, kCUDA),
                         [](const auto& info) { return info.param.is_cuda() ? "cuda" : "cpu"; });

}  // namespace
}  // namespace ft
