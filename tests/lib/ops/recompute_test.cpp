// recompute: a block with a dropout inside, its gradients with recomputation (whole and
// selective) against without, bit for bit (f64 and f32 on the CPU; bf16 on CUDA in both kernel modes), the Philox counter
// left where the plain run leaves it, a frozen input with trainable parameters, nothing
// recorded when nothing trains, and the parameters' ready hooks called once.
#include <vector>

#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/random/random.h"
#include "lib/ops/recompute/recompute.h"
#include "lib/ops/reduce/reduce.h"
#include "tests/lib/fused_test_util.h"

namespace ft {
namespace {

using namespace ft::test;

/// A transformer-MLP-shaped block: x + W2·dropout(gelu(W1·x + b1)), the dropout drawing from the
/// device's Philox counter as training does.
struct Block {
  Tensor w1, b1, w2;
  Tensor operator()(const Tensor& x) const {
    const Tensor h = gelu(linear(x, w1, b1));
    const Tensor dropped = dropout(h, 0.25, 77, PhiloxCounter::on(x.device()).take(static_cast<uint64_t>(h.numel())));
    return x + linear(dropped, w2);
  }
  std::vector<Tensor> parameters() const { return {w1, b1, w2}; }
};

Block make_block(int64_t width, DType dtype, Device device, Generator& gen) {
  auto leaf = [&](const Shape& s) { return fresh_leaf(random_tensor(s, DType::F64, kCPU, gen), dtype, device); };
  return Block{leaf({2 * width, width}), leaf({2 * width}), leaf({width, 2 * width})};
}

struct BlockRun {
  std::vector<std::vector<double>> grads;  // x, then each parameter
  std::vector<double> y;
  uint64_t counter_after = 0;
};

/// Two blocks and a sum of squares, backward from there; x's gradient when it needs one.
BlockRun run_blocks(const Block& a, const Block& b, const Tensor& x, Recompute how) {
  for (const Tensor& p : a.parameters()) p.zero_grad();
  for (const Tensor& p : b.parameters()) p.zero_grad();
  if (x.requires_grad()) x.zero_grad();
  PhiloxCounter::on(x.device()).set(40);
  auto apply = [how](const Block& block, const Tensor& in) { return recompute(block, in, block.parameters(), how); };
  const Tensor y = apply(b, apply(a, x));
  sum_all(y * y).backward();
  BlockRun run;
  run.y = y.to_vector();
  if (x.requires_grad()) run.grads.push_back(x.grad().to_vector());
  for (const Block* block : {&a, &b})
    for (const Tensor& p : block->parameters()) run.grads.push_back(p.grad().to_vector());
  run.counter_after = PhiloxCounter::on(x.device()).value();
  return run;
}

void expect_same_runs(const BlockRun& plain, const BlockRun& again) {
  EXPECT_EQ(plain.y, again.y);
  ASSERT_EQ(plain.grads.size(), again.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) EXPECT_EQ(plain.grads[i], again.grads[i]) << "gradient " << i;
  EXPECT_EQ(plain.counter_after, again.counter_after) << "the Philox counter";
}

TEST(RecomputeTest, GradientsEqualThePlainRunBitForBit) {
  Generator gen = test_generator();
  for (DType dtype : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Block a = make_block(8, dtype, kCPU, gen), b = make_block(8, dtype, kCPU, gen);
    const Tensor x = fresh_leaf(random_tensor({3, 5, 8}, DType::F64, kCPU, gen), dtype, kCPU);
    const BlockRun plain = run_blocks(a, b, x, Recompute::None);
    expect_same_runs(plain, run_blocks(a, b, x, Recompute::Block));
    expect_same_runs(plain, run_blocks(a, b, x, Recompute::Selective));
    // The masks matter: from another counter value the output differs.
    NoGradGuard no_grad;
    PhiloxCounter::on(kCPU).set(48);
    EXPECT_NE(plain.y, b(a(x.detach())).to_vector());
  }
}

TEST(RecomputeTest, AFrozenInputStillTrainsTheParameters) {
  Generator gen = test_generator();
  const Block a = make_block(6, DType::F64, kCPU, gen), b = make_block(6, DType::F64, kCPU, gen);
  const Tensor x = random_tensor({4, 6}, DType::F64, kCPU, gen);  // needs no gradient (a LoRA run's embedding)
  const BlockRun plain = run_blocks(a, b, x, Recompute::None);
  expect_same_runs(plain, run_blocks(a, b, x, Recompute::Block));
  expect_same_runs(plain, run_blocks(a, b, x, Recompute::Selective));
}

TEST(RecomputeTest, NothingIsRecordedWhenNothingTrains) {
  Generator gen = test_generator();
  const Block a = make_block(4, DType::F64, kCPU, gen);
  const Tensor x = random_tensor({2, 4}, DType::F64, kCPU, gen);
  std::vector<Tensor> frozen;
  for (const Tensor& p : a.parameters()) frozen.push_back(p.detach());
  const Block still{frozen[0], frozen[1], frozen[2]};
  EXPECT_FALSE(recompute(still, x, still.parameters()).requires_grad());
  NoGradGuard no_grad;
  EXPECT_FALSE(recompute(a, x, a.parameters()).requires_grad()) << "recorded under NoGradGuard";
}

TEST(RecomputeTest, EachParameterIsReadyOnce) {
  Generator gen = test_generator();
  const Block a = make_block(4, DType::F64, kCPU, gen), b = make_block(4, DType::F64, kCPU, gen);
  std::vector<int> calls(6, 0);
  std::vector<uint64_t> ids;
  std::vector<Tensor> params = a.parameters();
  for (const Tensor& p : b.parameters()) params.push_back(p);
  for (size_t i = 0; i < params.size(); ++i) ids.push_back(add_grad_ready_hook(params[i], [&calls, i] { ++calls[i]; }));
  const Tensor x = fresh_leaf(random_tensor({2, 4}, DType::F64, kCPU, gen), DType::F64, kCPU);
  run_blocks(a, b, x, Recompute::Selective);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(calls[i], 1) << "parameter " << i;
    remove_grad_ready_hook(params[i], ids[i]);
  }
}

TEST(RecomputeTest, RejectsAnUndefinedInput) {
  Generator gen = test_generator();
  const Block a = make_block(4, DType::F64, kCPU, gen);
  EXPECT_FT_ERROR(recompute(a, Tensor(), a.parameters()), "recompute: x is an undefined tensor");
}

// On CUDA in bf16, each kernel mode: the fused kernels (linear's epilogue, the dropout) run the
// same way twice, so recomputation changes no bit there either.
TEST(RecomputeTest, CudaGradientsEqualThePlainRunBitForBit) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    SCOPED_TRACE(kernel_mode_name(mode));
    KernelModeGuard guard(mode);
    const Block a = make_block(64, DType::BF16, kCUDA, gen), b = make_block(64, DType::BF16, kCUDA, gen);
    const Tensor x = fresh_leaf(random_tensor({4, 16, 64}, DType::F64, kCPU, gen), DType::BF16, kCUDA);
    const BlockRun plain = run_blocks(a, b, x, Recompute::None);
    expect_same_runs(plain, run_blocks(a, b, x, Recompute::Block));
    expect_same_runs(plain, run_blocks(a, b, x, Recompute::Selective));
  }
}

// Selective keeps each 2-D product of the first run and hands it to the replay, which must make
// the same ones: a replay whose products differ in shape is refused, not given the wrong tensor.
TEST(RecomputeTest, SelectiveReplayChecksItsProducts) {
  Generator gen = test_generator();
  const Tensor w = random_tensor({3, 4}, DType::F64, kCPU, gen), x = random_tensor({2, 4}, DType::F64, kCPU, gen);
  MatmulStash::Outputs kept;
  {
    MatmulStash saving(kept, MatmulStash::Mode::Save);
    matmul(x, w, false, true);
  }
  ASSERT_EQ(kept.products.size(), 1u);
  const std::vector<double> first = kept.products[0].to_vector();
  {
    MatmulStash replaying(kept, MatmulStash::Mode::Replay);
    EXPECT_EQ(matmul(x, w, false, true).to_vector(), first);  // the kept tensor itself
    EXPECT_FT_ERROR(matmul(x, w, false, true), "more products than the first run's 1");
  }
  {
    MatmulStash replaying(kept, MatmulStash::Mode::Replay);
    const Tensor wider = random_tensor({5, 4}, DType::F64, kCPU, gen);
    // Once (EXPECT_FT_ERROR runs its statement twice, and the stash moves on each time).
    EXPECT_TRUE(error_mentions([&] { matmul(x, wider, false, true); },
                               "product 1 of the replay is [2, 5], the first run's was [2, 3]"));
  }
  // Batched products (attention's) are never kept.
  {
    MatmulStash saving(kept, MatmulStash::Mode::Save);
    matmul(x.reshape({1, 2, 4}), w.reshape({1, 3, 4}), false, true);
  }
  EXPECT_EQ(kept.products.size(), 1u);
}

// Selective takes the first run's product back instead of computing it again: with the weight
// changed in place between forward and backward, block recomputation sees the new weight in
// gelu's derivative, selective the product the plain run saved.
TEST(RecomputeTest, SelectiveKeepsTheProductBlockRecomputesIt) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({3, 4}, DType::F64, kCPU, gen);
  const Tensor original = random_tensor({5, 4}, DType::F64, kCPU, gen);
  auto weight_gradient = [&](Recompute how) {
    const Tensor w = fresh_leaf(original, DType::F64, kCPU);
    auto fn = [&w](const Tensor& in) { return gelu(matmul(in, w, false, true)); };
    const Tensor y = recompute(fn, x, {w}, how);
    {
      NoGradGuard no_grad;
      w.copy_(Tensor::zeros(w.shape(), DType::F64));
    }
    sum_all(y).backward();
    return w.grad().to_vector();
  };
  const std::vector<double> plain = weight_gradient(Recompute::None);
  EXPECT_EQ(weight_gradient(Recompute::Selective), plain);
  EXPECT_NE(weight_gradient(Recompute::Block), plain);
}

TEST(RecomputeTest, ParsesTheModeNames) {
  EXPECT_EQ(parse_recompute("none", "t"), Recompute::None);
  EXPECT_EQ(parse_recompute("block", "t"), Recompute::Block);
  EXPECT_EQ(parse_recompute("selective", "t"), Recompute::Selective);
  EXPECT_FT_ERROR(parse_recompute("all", "ft-x"), "ft-x: --recompute must be none, block or selective, got 'all'");
}

}  // namespace
}  // namespace ft
