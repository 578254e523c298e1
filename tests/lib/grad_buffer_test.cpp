// Flat gradient storage: the layout and its shards, GradBuffer views that backward adds into,
// the gradient-ready hooks (once per backward, after the last contribution, tied weights
// counted), claimed views (claim_leaf_grad_view), and on CUDA the fused ops that write their
// parameter gradients straight into the f32 views (grad_target, or a consumer's claim) against
// the same ops handing bf16 gradients to autograd.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "lib/flat_layout.h"
#include "lib/grad_buffer.h"
#include "lib/kernel_mode.h"
#include "lib/ops/activation/activation.h"
#include "lib/ops/attention/attention.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/embedding/embedding.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/linear/linear_cuda.h"
#include "lib/ops/linear_cross_entropy/linear_cross_entropy.h"
#include "lib/ops/linear_norm/linear_norm.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/random/random.h"
#include "lib/ops/reduce/reduce.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using test::all_close;
using test::all_equal;
using test::random_tensor;
using test::test_generator;

TEST(FlatLayoutTest, GroupsByDtypeAndAlignsEveryTensor) {
  Generator gen = test_generator();
  const std::vector<Tensor> tensors{random_tensor({3, 5}, DType::F32, kCPU, gen),
                                    random_tensor({7}, DType::F64, kCPU, gen),
                                    random_tensor({64}, DType::F32, kCPU, gen),
                                    random_tensor({2, 2}, DType::F32, kCPU, gen)};
  const FlatLayout layout(tensors, {DType::F32, DType::F64, DType::F32, DType::F32});
  ASSERT_EQ(layout.groups().size(), 2u);
  EXPECT_EQ(layout.groups()[0].members, (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(layout.groups()[1].members, (std::vector<size_t>{1}));
  EXPECT_EQ(layout.slot(0).offset, 0);
  EXPECT_EQ(layout.slot(2).offset, FlatLayout::kAlign);
  EXPECT_EQ(layout.slot(3).offset, 2 * FlatLayout::kAlign);
  EXPECT_EQ(layout.groups()[0].size, 3 * FlatLayout::kAlign);
  const Tensor flat = layout.allocate(0);
  const Tensor view = layout.view(flat, 2);
  EXPECT_EQ(view.shape(), (Shape{64}));
  EXPECT_TRUE(view.shares_storage(flat));
  view.copy_(tensors[2]);
  EXPECT_TRUE(all_equal(flat.narrow(0, FlatLayout::kAlign, 64), tensors[2]));
  EXPECT_FT_ERROR(layout.view(layout.allocate(1), 0), "FlatLayout::view");
}

TEST(FlatLayoutTest, BucketsTileEachGroupBackwardsInEqualChunks) {
  Generator gen = test_generator();
  std::vector<Tensor> tensors;
  for (int64_t n : {1000, 3, 777, 64, 129}) tensors.push_back(random_tensor({n}, DType::F32, kCPU, gen));
  for (int world = 1; world <= 7; ++world) {
    const int64_t unit = FlatLayout::kAlign * world;
    const FlatLayout layout(tensors, std::vector<DType>(tensors.size(), DType::F32), unit);
    const int64_t size = layout.groups()[0].size;
    ASSERT_EQ(size % unit, 0) << "world " << world;
    ASSERT_GE(size, 1000 + 3 + 777 + 64 + 129);
    for (int64_t max_elements : {int64_t{1}, int64_t{300}, int64_t{1024}, int64_t{1} << 20}) {
      const std::vector<FlatLayout::Bucket> buckets = layout.buckets(max_elements, world);
      int64_t expected_end = size;  // from the end of the buffer to its beginning
      for (const FlatLayout::Bucket& b : buckets) {
        EXPECT_EQ(b.end, expected_end);
        EXPECT_LT(b.begin, b.end);
        EXPECT_EQ(b.size() % unit, 0);
        EXPECT_LE(b.size(), std::max(unit, max_elements));
        int64_t chunk_begin = b.begin;
        for (int rank = 0; rank < world; ++rank) {
          const auto [first, last] = b.chunk(rank, world);
          EXPECT_EQ(first, chunk_begin);
          EXPECT_EQ(last - first, b.size() / world);
          chunk_begin = last;
        }
        EXPECT_EQ(chunk_begin, b.end);
        for (size_t i = 0; i < tensors.size(); ++i) {
          const FlatLayout::Slot& s = layout.slot(i);
          const bool overlaps = s.offset < b.end && s.offset + s.numel() > b.begin;
          EXPECT_EQ(std::count(b.members.begin(), b.members.end(), i), overlaps ? 1 : 0) << "tensor " << i;
        }
        expected_end = b.begin;
      }
      EXPECT_EQ(expected_end, 0) << "world " << world << ", buckets of " << max_elements;
    }
  }
  // Padded to kAlign only: 19 aligned units, not a multiple of 3 of them.
  const FlatLayout unpadded(tensors, std::vector<DType>(tensors.size(), DType::F32));
  ASSERT_NE(unpadded.groups()[0].size % (3 * FlatLayout::kAlign), 0);
  EXPECT_FT_ERROR(static_cast<void>(unpadded.buckets(1024, 3)), "not a multiple");
}

// ZeRO-3's units (a layer each; -1 the rest): a unit's first tensor starts at a multiple of the
// group multiple, and no bucket holds tensors of two units, whatever the bucket size.
TEST(FlatLayoutTest, BucketsNeverMixUnits) {
  Generator gen = test_generator();
  std::vector<Tensor> tensors;
  for (int64_t n : {1000, 3, 777, 64, 129, 300, 5}) tensors.push_back(random_tensor({n}, DType::F32, kCPU, gen));
  const std::vector<int> units = {-1, 0, 0, 1, 1, 1, -1};
  for (int world : {1, 2, 3, 4}) {
    const int64_t unit = FlatLayout::kAlign * world;
    const FlatLayout layout(tensors, std::vector<DType>(tensors.size(), DType::F32), unit, units);
    for (size_t i : {size_t{1}, size_t{3}, size_t{6}}) EXPECT_EQ(layout.slot(i).offset % unit, 0) << "tensor " << i;
    for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(layout.slot(i).unit, units[i]);
    for (int64_t max_elements : {int64_t{1}, int64_t{300}, int64_t{1} << 20}) {
      int64_t expected_end = layout.groups()[0].size;
      for (const FlatLayout::Bucket& b : layout.buckets(max_elements, world)) {
        EXPECT_EQ(b.end, expected_end);
        EXPECT_EQ(b.size() % unit, 0);
        ASSERT_FALSE(b.members.empty());
        for (size_t i : b.members) EXPECT_EQ(units[i], b.unit) << "world " << world << ", bucket at " << b.begin;
        expected_end = b.begin;
      }
      EXPECT_EQ(expected_end, 0);
    }
  }
  EXPECT_FT_ERROR(FlatLayout(tensors, std::vector<DType>(tensors.size(), DType::F32), FlatLayout::kAlign, {0, 1}),
                  "units");
}

// loss = Σ (x·W)∘(z·W) + Σ b∘(x·W): W is used by two products (a tied weight), b once.
Tensor tied_loss(const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& b) {
  const Tensor xw = matmul(x, w);
  return sum_all(xw * matmul(z, w)) + sum_all(xw * b);
}

TEST(GradBufferTest, BackwardAddsIntoTheViewsAndZeroClearsThem) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({4, 3}, DType::F64, kCPU, gen), z = random_tensor({4, 3}, DType::F64, kCPU, gen);
  Tensor w = random_tensor({3, 5}, DType::F64, kCPU, gen).requires_grad_();
  Tensor b = random_tensor({5}, DType::F64, kCPU, gen).requires_grad_();
  // The reference: plain leaves, fresh gradients.
  tied_loss(x, z, w, b).backward();
  const Tensor w_grad = test::fresh_copy(w.grad(), DType::F64, kCPU), b_grad = test::fresh_copy(b.grad(), DType::F64, kCPU);
  w.zero_grad();
  b.zero_grad();
  {
    GradBuffer buffer({w, b});
    EXPECT_EQ(buffer.layout().groups().size(), 1u);
    EXPECT_TRUE(w.grad().shares_storage(buffer.flat(0)));
    EXPECT_TRUE(all_equal(w.grad(), Tensor::zeros(w.shape(), DType::F64)));
    tied_loss(x, z, w, b).backward();
    EXPECT_TRUE(all_close(w.grad(), w_grad, 1e-14));
    EXPECT_TRUE(all_close(b.grad(), b_grad, 1e-14));
    tied_loss(x, z, w, b).backward();  // a second backward accumulates
    EXPECT_TRUE(all_close(w.grad(), w_grad * 2.0, 1e-14));
    EXPECT_TRUE(all_close(b.grad(), b_grad * 2.0, 1e-14));
    EXPECT_TRUE(w.grad().shares_storage(buffer.flat(0))) << "backward replaced the view";
    buffer.zero();  // logical: the next contribution overwrites, a reader sees zeros
    sum_all(matmul(x, w.detach()) * b).backward();  // reaches b only
    EXPECT_TRUE(all_equal(w.grad(), Tensor::zeros(w.shape(), DType::F64))) << "a stale view read as zeros";
    EXPECT_TRUE(all_close(b.grad(), sum_to(matmul(x, w.detach()), {5}), 1e-14)) << "overwritten, not added";
    buffer.zero();
    EXPECT_TRUE(all_equal(buffer.flat(0), Tensor::zeros(buffer.flat(0).shape(), DType::F64)));
    EXPECT_FT_ERROR(GradBuffer({w}), "already has a gradient view");
  }
  EXPECT_FALSE(w.grad().defined()) << "the buffer's destructor leaves no view behind";
  tied_loss(x, z, w, b).backward();  // and backward takes fresh gradients again
  EXPECT_TRUE(all_close(w.grad(), w_grad, 1e-14));
}

// claim_leaf_grad_view: inside a backward, a CUDA f32 view is handed out to be overwritten
// while logically zero, then to be added into; outside a backward, or for a CPU view, nothing.
TEST(GradBufferTest, ClaimedViewsAreOverwrittenThenAddedInto) {
  Generator gen = test_generator();
  for (const Device device : {kCPU, kCUDA}) {
    if (device == kCUDA && !cuda_available()) continue;
    Tensor b = random_tensor({5}, DType::F32, device, gen).requires_grad_();
    const Tensor x = random_tensor({5}, DType::F32, device, gen).requires_grad_();
    GradBuffer buffer({b});
    EXPECT_FALSE(claim_leaf_grad_view(b).defined()) << "outside a backward";
    std::vector<GradOutput> claims;
    auto claiming = [&](const Tensor& in) {
      Tensor out;
      {
        NoGradGuard no_grad;
        out = in * 1.0;
      }
      return record("claiming", out, {in}, [&](const Tensor& g) {
        claims.push_back(claim_leaf_grad_view(b));
        return std::vector<Tensor>{g};
      });
    };
    sum_all(claiming(x)).backward();
    sum_all(claiming(x)).backward();
    ASSERT_EQ(claims.size(), 2u);
    if (device == kCPU) {
      EXPECT_FALSE(claims[0].defined() || claims[1].defined()) << "only f32 CUDA views are claimed";
      continue;
    }
    for (const GradOutput& claim : claims) {
      EXPECT_TRUE(claim.view);
      EXPECT_TRUE(claim.tensor.shares_storage(b.grad()));
    }
    EXPECT_FALSE(claims[0].accumulate) << "the view was logically zero";
    EXPECT_TRUE(claims[1].accumulate) << "the first claim counts as written";
    buffer.zero();
    EXPECT_FALSE(claim_leaf_grad_view(b).defined());
  }
}

TEST(GradBufferTest, FrozenTensorsCannotBeAttached) {
  Generator gen = test_generator();
  Tensor frozen = random_tensor({3}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(GradBuffer({frozen}), "requires grad");
}

// Each trainable leaf's hook records how often it fired and its gradient at that moment.
struct HookLog {
  std::map<std::string, int> calls;
  std::map<std::string, Tensor> seen;
  void watch(const std::string& name, const Tensor& leaf) {
    add_grad_ready_hook(leaf, [this, name, leaf] {
      ++calls[name];
      seen[name] = test::fresh_copy(leaf.grad(), leaf.grad().dtype(), kCPU);  // as it stands now
    });
  }
};

void expect_hooks_fire_once_after_the_last_contribution(bool with_buffer) {
  Generator gen = test_generator(with_buffer);
  const Tensor x = random_tensor({4, 3}, DType::F64, kCPU, gen), z = random_tensor({4, 3}, DType::F64, kCPU, gen);
  Tensor w = random_tensor({3, 5}, DType::F64, kCPU, gen).requires_grad_();
  Tensor b = random_tensor({5}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor frozen = random_tensor({5}, DType::F64, kCPU, gen);  // used, but needs no gradient
  std::unique_ptr<GradBuffer> buffer = with_buffer ? std::make_unique<GradBuffer>(std::vector<Tensor>{w, b}) : nullptr;
  HookLog log;
  log.watch("w", w);
  log.watch("b", b);
  for (int round = 1; round <= 2; ++round) {
    (tied_loss(x, z, w, b) + sum_all(matmul(x, w) * frozen)).backward();
    EXPECT_EQ(log.calls["w"], round) << "the tied weight's hook must fire once per backward";
    EXPECT_EQ(log.calls["b"], round);
    // At firing time the gradient already held every contribution of this backward.
    EXPECT_TRUE(all_equal(log.seen["w"], w.grad().to(kCPU)));
    EXPECT_TRUE(all_equal(log.seen["b"], b.grad().to(kCPU)));
  }
  // gradients() (torch.autograd.grad) touches no leaf and calls no hook.
  (void)gradients(tied_loss(x, z, w, b), Tensor(), {w, b});
  EXPECT_EQ(log.calls["w"], 2);
  clear_grad_ready_hooks(w);
  tied_loss(x, z, w, b).backward();
  EXPECT_EQ(log.calls["w"], 2);
  EXPECT_EQ(log.calls["b"], 3);
  EXPECT_FT_ERROR(add_grad_ready_hook(frozen, [] {}), "requires grad");
}

TEST(GradReadyHookTest, FiresOncePerBackwardAfterTheLastContribution) {
  expect_hooks_fire_once_after_the_last_contribution(false);
}
TEST(GradReadyHookTest, FiresOncePerBackwardWithGradientViews) {
  expect_hooks_fire_once_after_the_last_contribution(true);
}

TEST(GradReadyHookTest, ALeafUsedTwiceInOneOpFiresOnce) {
  Generator gen = test_generator();
  Tensor a = random_tensor({6}, DType::F64, kCPU, gen).requires_grad_();
  GradBuffer buffer({a});
  int calls = 0;
  add_grad_ready_hook(a, [&] { ++calls; });
  sum_all(a * a).backward();  // one node, two edges into the same leaf
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(all_close(a.grad(), a.detach() * 2.0, 1e-15));
}

// A hook removed by its id stops firing; the leaf's other hooks keep firing; removing it again,
// or from another leaf, removes nothing.
TEST(GradReadyHookTest, RemovingOneHookLeavesTheOthers) {
  Generator gen = test_generator();
  Tensor a = random_tensor({5}, DType::F64, kCPU, gen).requires_grad_();
  Tensor c = random_tensor({5}, DType::F64, kCPU, gen).requires_grad_();
  int first = 0, second = 0;
  const uint64_t first_id = add_grad_ready_hook(a, [&] { ++first; });
  const uint64_t second_id = add_grad_ready_hook(a, [&] { ++second; });
  EXPECT_NE(first_id, second_id);
  sum_all(a * c).backward();
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
  EXPECT_FALSE(remove_grad_ready_hook(c, first_id));  // not c's
  EXPECT_TRUE(remove_grad_ready_hook(a, first_id));
  EXPECT_FALSE(remove_grad_ready_hook(a, first_id));  // already gone
  sum_all(a * c).backward();
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);
  EXPECT_TRUE(remove_grad_ready_hook(a, second_id));
  sum_all(a * c).backward();
  EXPECT_EQ(second, 2);
}

// ---- CUDA: fused ops writing into the f32 views ----

/// Runs `loss_of(params)` backward twice on bf16 CUDA parameters: once as plain leaves (bf16
/// gradients from the ops, as before GradBuffer), once attached to a GradBuffer (the ops write
/// f32 views through grad_target). The two must agree to bf16 rounding, and a second backward
/// into the views must double them.
void expect_views_match_fresh_gradients(const std::vector<Tensor>& values,
                                        const std::function<Tensor(const std::vector<Tensor>&)>& loss_of) {
  std::vector<Tensor> plain, viewed;
  for (const Tensor& v : values) {
    plain.push_back(test::fresh_leaf(v, DType::BF16, kCUDA));
    viewed.push_back(test::fresh_leaf(v, DType::BF16, kCUDA));
  }
  loss_of(plain).backward();
  GradBuffer buffer(viewed);
  std::map<size_t, int> calls;
  for (size_t i = 0; i < viewed.size(); ++i) add_grad_ready_hook(viewed[i], [&calls, i] { ++calls[i]; });
  loss_of(viewed).backward();
  for (size_t i = 0; i < values.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    ASSERT_TRUE(plain[i].grad().defined());
    EXPECT_EQ(viewed[i].grad().dtype(), DType::F32);
    EXPECT_TRUE(viewed[i].grad().shares_storage(buffer.flat(0)));
    EXPECT_TRUE(all_close(viewed[i].grad(), plain[i].grad().to(DType::F32), test::grad_tolerance(DType::BF16)));
    EXPECT_EQ(calls[i], 1);
  }
  std::vector<Tensor> first;
  for (const Tensor& p : viewed) first.push_back(test::fresh_copy(p.grad(), DType::F32, kCPU));
  loss_of(viewed).backward();
  for (size_t i = 0; i < values.size(); ++i) {
    SCOPED_TRACE("accumulated parameter " + std::to_string(i));
    EXPECT_TRUE(all_close(viewed[i].grad(), first[i] * 2.0, 1e-6));
  }
}

class FusedGradViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    mode_.emplace(KernelMode::Fused);
  }
  void TearDown() override { mode_.reset(); }

 private:
  std::optional<KernelModeGuard> mode_;
};

TEST_F(FusedGradViewTest, LinearWithAndWithoutActivation) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({37, 24}, DType::BF16, kCUDA, gen);
  for (Activation act : {Activation::None, Activation::GELU, Activation::ReLU}) {
    SCOPED_TRACE(activation_name(act));
    expect_views_match_fresh_gradients(
        {random_tensor({40, 24}, DType::F32, kCPU, gen), random_tensor({40}, DType::F32, kCPU, gen)},
        [&](const std::vector<Tensor>& p) { return sum_all(cast(linear(x, p[0], p[1], act), DType::F32) * 0.5); });
  }
}

// The narrow forward's layers (bf16, 10 outputs, IN a multiple of 32: the MLP's classifier) sum
// the bias's gradient straight into its view; the loss weighs each output differently.
TEST_F(FusedGradViewTest, NarrowLinear) {
  if constexpr (kCudaBuild)
    ASSERT_TRUE(cuda::narrow_linear_supported(Tensor::empty({300, 64}, DType::BF16, kCUDA),
                                              Tensor::empty({10, 64}, DType::BF16, kCUDA)));
  Generator gen = test_generator();
  const Tensor x = random_tensor({300, 64}, DType::BF16, kCUDA, gen);
  const Tensor weights = random_tensor({300, 10}, DType::F32, kCUDA, gen);
  expect_views_match_fresh_gradients(
      {random_tensor({10, 64}, DType::F32, kCPU, gen), random_tensor({10}, DType::F32, kCPU, gen)},
      [&](const std::vector<Tensor>& p) { return sum_all(cast(linear(x, p[0], p[1]), DType::F32) * weights); });
}

// The twin's matmul primitive writes B's gradient into the view too (the unfused path, and
// fused linear's fallback for widths cuBLASLt's epilogues do not take, such as 10 outputs).
TEST_F(FusedGradViewTest, MatmulPrimitiveInBothModes) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({3, 37, 24}, DType::BF16, kCUDA, gen), x2 = random_tensor({37, 24}, DType::BF16, kCUDA, gen);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    KernelModeGuard guard(mode);
    SCOPED_TRACE(kernel_mode_name(mode));
    expect_views_match_fresh_gradients(
        {random_tensor({10, 24}, DType::F32, kCPU, gen), random_tensor({10}, DType::F32, kCPU, gen)},
        [&](const std::vector<Tensor>& p) { return sum_all(cast(linear(x, p[0], p[1]), DType::F32)); });
    expect_views_match_fresh_gradients({random_tensor({24, 16}, DType::F32, kCPU, gen)}, [&](const std::vector<Tensor>& p) {
      return sum_all(cast(matmul(x2, p[0]) * 0.5, DType::F32));
    });
  }
}

TEST_F(FusedGradViewTest, LayerNormAddLayerNormAndTheActDropoutForm) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({33, 96}, DType::BF16, kCUDA, gen), r = random_tensor({33, 96}, DType::BF16, kCUDA, gen);
  const Tensor up = random_tensor({33, 96}, DType::BF16, kCUDA, gen);
  const std::vector<Tensor> values{random_tensor({96}, DType::F32, kCPU, gen), random_tensor({96}, DType::F32, kCPU, gen)};
  expect_views_match_fresh_gradients(values, [&](const std::vector<Tensor>& p) {
    return sum_all(cast(layer_norm(x, p[0], p[1]) * up, DType::F32));
  });
  expect_views_match_fresh_gradients(values, [&](const std::vector<Tensor>& p) {
    AddNormResult a = add_layer_norm(x, r, p[0], p[1]);
    return sum_all(cast(a.out * up + a.sum * up, DType::F32));
  });
  const Tensor offset = philox_offset(4096, kCUDA);
  expect_views_match_fresh_gradients(values, [&](const std::vector<Tensor>& p) {
    return sum_all(cast(layer_norm_act_dropout(x, p[0], p[1], Activation::GELU, 0.1, 7, offset) * up, DType::F32));
  });
}

// The ops whose consumer hands the linear its bias gradient: the norm's backward
// (linear_add_layer_norm) and the attention's (qkv_attention) claim the bias's view and write
// the column sums there, overwriting it on the first backward and adding on the second.
TEST_F(FusedGradViewTest, BiasGradientsHandedOverIntoTheViews) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({2, 40, 64}, DType::BF16, kCUDA, gen);
  const Tensor residual = random_tensor({2, 40, 96}, DType::BF16, kCUDA, gen);
  const Tensor up = random_tensor({2, 40, 96}, DType::BF16, kCUDA, gen);
  expect_views_match_fresh_gradients(
      {random_tensor({96, 64}, DType::F32, kCPU, gen), random_tensor({96}, DType::F32, kCPU, gen),
       test::uniform_tensor({96}, DType::F32, kCPU, gen, 0.5, 1.5), random_tensor({96}, DType::F32, kCPU, gen)},
      [&](const std::vector<Tensor>& p) {
        const AddNormResult r = linear_add_layer_norm(x, p[0], p[1], residual, p[2], p[3]);
        return sum_all(cast(r.out * up + r.sum * up, DType::F32));
      });
  const Tensor attended_up = random_tensor({2, 40, 128}, DType::BF16, kCUDA, gen);
  expect_views_match_fresh_gradients(
      {test::uniform_tensor({3 * 128, 64}, DType::F32, kCPU, gen, -0.2, 0.2), random_tensor({3 * 128}, DType::F32, kCPU, gen)},
      [&](const std::vector<Tensor>& p) {
        return sum_all(cast(qkv_attention(x, p[0], p[1], 2, true) * attended_up, DType::F32));
      });
}

TEST_F(FusedGradViewTest, TiedEmbeddingAndLinearCrossEntropy) {
  Generator gen = test_generator();
  const int64_t vocab = 203, channels = 64, batch = 3, steps = 17;
  const Tensor ids = test::random_ids({batch, steps}, vocab, DType::I64, kCUDA, gen);
  const Tensor targets = test::random_ids({batch * steps}, vocab, DType::I64, kCUDA, gen);
  // wte feeds both the embedding and the tied output layer: two contributions into one view.
  expect_views_match_fresh_gradients(
      {random_tensor({vocab, channels}, DType::F32, kCPU, gen), random_tensor({32, channels}, DType::F32, kCPU, gen)},
      [&](const std::vector<Tensor>& p) {
        const Tensor h = token_position_embedding(ids, p[0], p[1]);
        return linear_cross_entropy(h.reshape({batch * steps, channels}), p[0], targets, {}, 16) * 1.5;
      });
}

}  // namespace
}  // namespace ft
