// ZeRO-3 in one process (world size 1: Gloo on the CPU, NCCL on a GPU): a Llama of four layers
// whose layers' parameters exist only in ParameterGather's two slots, gathered around each
// layer's forward and backward, trains exactly like the same model under ZeRO-2, whose
// parameters are whole: the same losses and optimizer state bit for bit, with each --recompute
// mode, two micro-batches a step and an evaluation (no-grad forward) between steps. (ZeRO-2 is
// the reference because both leave backward's gradients in the parameters' dtype, bf16 on CUDA,
// where the plain step's land in f32: DataParallelTest.ZeroTwoMatchesThePlainStep... compares
// those.) The whole model reads back and loads through WholeParameters; a captured step after an
// evaluation gathers every layer. The 2- and 4-process equivalences are the dp_*_zero3 ctests.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "lib/autograd.h"
#include "models/llama/llama.h"
#include "optim/adamw.h"
#include "tests/lib/test_util.h"
#include "tests/train/distributed/one_rank.h"
#include "train/distributed/data_parallel.h"
#include "train/loop/graphed_step.h"

namespace ft {
namespace {

using test::error_mentions;
using test::OneRank;

LlamaConfig four_layers() {
  return {.vocab = 29, .hidden = 32, .intermediate = 48, .layers = 4, .heads = 4, .kv_heads = 2,
          .max_positions = 16, .rms_eps = 1e-5, .rope = {.theta = 500.0}, .tie_embeddings = false};
}

struct Tokens {
  Tensor ids, targets;
};

Tokens random_tokens(std::mt19937& rng, Device device) {
  std::uniform_int_distribution<int> token(0, 28);
  std::vector<double> ids(2 * 12), targets(2 * 12);
  for (double& v : ids) v = token(rng);
  for (double& v : targets) v = token(rng);
  return {Tensor::from_vector(ids, {2, 12}, DType::I64).to(device),
          Tensor::from_vector(targets, {2, 12}, DType::I64).to(device)};
}

class ZeroThreeTest : public ::testing::TestWithParam<std::tuple<Device, Recompute>> {
 protected:
  void SetUp() override {
    FT_SKIP_UNLESS_AVAILABLE(device());
#ifndef FT_TEST_HAVE_GLOO
    if (!device().is_cuda()) GTEST_SKIP() << "built without Gloo";
#endif
  }
  Device device() const { return std::get<0>(GetParam()); }
  DType dtype() const { return device().is_cuda() ? DType::BF16 : DType::F32; }
};

TEST_P(ZeroThreeTest, TrainsLikeZeroTwoWithEachLayerGatheredInTurn) {
  const Recompute recompute = std::get<1>(GetParam());
  Llama reference(four_layers(), 7), sharded(four_layers(), 7);  // reference: ZeRO-2
  for (Llama* m : {&reference, &sharded}) {
    m->to(device(), dtype());
    m->set_recompute(recompute);
  }
  AdamW reference_optimizer(reference.parameters(), AdamW::Options{.lr = 1e-2, .partition = DataPartition{.bucket_bytes = 8192,
                                                                                                .shard_state = true,
                                                                                                .shard_grads = true}});
  // Buckets of 8 KB: several to a layer, and a layer's run of them is gathered whole.
  AdamW zero_optimizer(sharded.parameters(),
                       AdamW::Options{.lr = 1e-2, .partition = DataPartition{.bucket_bytes = 8192,
                                                                            .shard_state = true,
                                                                            .shard_grads = true,
                                                                            .shard_params = true,
                                                                            .units = sharded.layer_parameters()}});
  const ParameterStore& store = zero_optimizer.store();
  ASSERT_EQ(store.unit_count(), 4u);
  ASSERT_GT(store.runs()[store.run_of_unit(1)].buckets.size(), 1u);
  // A layer's weight has nothing of its own until gathered; the embeddings and head stay whole.
  const Tensor q_weight = sharded.layer_parameters()[2].front();
  EXPECT_EQ(q_weight.impl()->storage->data, nullptr);
  EXPECT_TRUE(error_mentions([&] { (void)q_weight.to_vector(); }, "ZeRO-3"));
  OneRank rank(device()), reference_rank(device());
  DataParallel dp(*rank.comm, zero_optimizer, DataParallel::Options{});
  DataParallel reference_dp(*reference_rank.comm, reference_optimizer, DataParallel::Options{});
  EXPECT_EQ(reference_dp.layer_gather(), nullptr);
  sharded.set_layer_gather(dp.layer_gather());

  std::mt19937 rng(11);
  const int micro_batches = 2;
  for (int step = 0; step < 3; ++step) {
    std::vector<Tokens> batch;
    for (int m = 0; m < micro_batches; ++m) batch.push_back(random_tokens(rng, device()));
    const Tokens held_out = random_tokens(rng, device());
    std::vector<double> losses[2];
    int k = 0;
    for (auto [model, optimizer, sync] : {std::tuple<Llama*, Optimizer*, DataParallel*>{&reference, &reference_optimizer, &reference_dp},
                                          {&sharded, &zero_optimizer, &dp}}) {
      optimizer->zero_grad();
      sync->before_forward();
      for (int m = 0; m < micro_batches; ++m) {
        const Tensor loss = model->loss(batch[m].ids, batch[m].targets) * (1.0 / micro_batches);
        losses[k].push_back(loss.item());
        sync->before_backward(m == micro_batches - 1);
        loss.backward();
      }
      sync->after_backward();
      optimizer->step();
      sync->end_step();
      // An evaluation between steps: a forward without a graph, on the updated weights.
      NoGradGuard no_grad;
      losses[k].push_back(model->loss(held_out.ids, held_out.targets).item());
      ++k;
    }
    EXPECT_EQ(losses[0], losses[1]) << "step " << step;
  }
  const std::map<std::string, Tensor> a = reference_optimizer.state(), b = zero_optimizer.state();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : a) EXPECT_EQ(tensor.to(kCPU).to_vector(), b.at(name).to(kCPU).to_vector()) << name;
  {
    const WholeParameters whole(zero_optimizer.store());
    const std::map<std::string, Tensor> mine = sharded.state_dict();
    for (const auto& [name, tensor] : reference.state_dict())
      EXPECT_EQ(tensor.to(kCPU).to_vector(), mine.at(name).to(kCPU).to_vector()) << name;
  }
  EXPECT_EQ(q_weight.impl()->storage->data, nullptr) << "the whole model outlived its scope";
  // Loading writes through the whole model into the shards: another model's weights, then its loss.
  Llama other(four_layers(), 8);
  other.to(device(), dtype());
  {
    const WholeParameters whole(zero_optimizer.store(), /*gather=*/false);
    sharded.load_state_dict(other.state_dict(), /*strict=*/true);
  }
  const Tokens probe = random_tokens(rng, device());
  NoGradGuard no_grad;
  EXPECT_EQ(other.loss(probe.ids, probe.targets).item(), sharded.loss(probe.ids, probe.targets).item());
}

// A captured step (GraphedStep: two eager steps, then the capture, then replays) after an
// evaluation, on two layers: the evaluation leaves both layers in the slots, and a capture that
// took them as gathered would replay them stale after each update. Losses and evaluations equal
// ZeRO-2's, graphed the same way, bit for bit.
TEST(ZeroThreeGraphTest, CapturedStepsAfterAnEvaluationGatherEveryLayer) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  LlamaConfig config = four_layers();
  config.layers = 2;
  Llama reference(config, 7), sharded(config, 7);
  for (Llama* m : {&reference, &sharded}) m->to(kCUDA, DType::BF16);
  AdamW reference_optimizer(reference.parameters(),
                            AdamW::Options{.lr = 1e-2, .partition = DataPartition{.shard_state = true,
                                                                                  .shard_grads = true}});
  AdamW zero_optimizer(sharded.parameters(),
                       AdamW::Options{.lr = 1e-2, .partition = DataPartition{.shard_state = true,
                                                                            .shard_grads = true,
                                                                            .shard_params = true,
                                                                            .units = sharded.layer_parameters()}});
  OneRank rank(kCUDA), reference_rank(kCUDA);
  DataParallel dp(*rank.comm, zero_optimizer, DataParallel::Options{});
  DataParallel reference_dp(*reference_rank.comm, reference_optimizer, DataParallel::Options{});
  sharded.set_layer_gather(dp.layer_gather());
  const LossFn loss = [](Module& m, const Batch& b) {
    return dynamic_cast<Llama&>(m).loss(b.at("inputs"), b.at("targets"));
  };
  GraphedStep reference_step(training_step(reference, reference_optimizer, loss, {}, &reference_dp));
  GraphedStep zero_step(training_step(sharded, zero_optimizer, loss, {}, &dp));
  std::mt19937 rng(5);
  for (int step = 1; step <= 5; ++step) {
    const Tokens t = random_tokens(rng, kCUDA), held_out = random_tokens(rng, kCUDA);
    Batch batch;
    batch.set("inputs", t.ids);
    batch.set("targets", t.targets);
    double losses[2], evaluations[2];
    int k = 0;
    using Run = std::tuple<Llama*, GraphedStep*, DataParallel*>;
    for (auto [model, graphed, sync] : {Run{&reference, &reference_step, &reference_dp}, Run{&sharded, &zero_step, &dp}}) {
      sync->begin_step(step);
      losses[k] = graphed->run({batch}).item();
      sync->end_step();
      // Evaluated before the capture and at the end only: an evaluation between two replays
      // would gather the layers afresh into the slots the graph reads.
      NoGradGuard no_grad;
      evaluations[k++] = step == 2 || step == 5 ? model->loss(held_out.ids, held_out.targets).item() : 0.0;
    }
    EXPECT_EQ(losses[0], losses[1]) << "step " << step;
    EXPECT_EQ(evaluations[0], evaluations[1]) << "after step " << step;
  }
  EXPECT_TRUE(zero_step.replaying());
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Device, Recompute>>& info) {
  static const char* const modes[] = {"none", "block", "selective"};
  return std::string(std::get<0>(info.param).is_cuda() ? "cuda_" : "cpu_") +
         modes[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(DevicesAndRecompute, ZeroThreeTest,
                         ::testing::Combine(::testing::Values(kCPU, kCUDA),
                                            ::testing::Values(Recompute::None, Recompute::Block, Recompute::Selective)),
                         case_name);

}  // namespace
}  // namespace ft
