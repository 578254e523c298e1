// attention against loops in f64 (the scaled scores, the causal mask, the softmax, the Philox
// dropout on the probabilities, and every gradient), and the fused flash kernels (bf16 on
// CUDA, HS 64 and 128) against the twin and the f64 reference, with their dropout masks
// compared bit for bit.
#include <cmath>
#include <vector>

#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/attention/attention.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/random/random.h"
#include "lib/philox.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/ops/flash_kernels_guard.h"

namespace ft {
namespace {

using namespace ft::test;

// out[b,h,i,:] = Σ_j keep·p_ij/(1-p) v[b,h,j,:], p = softmax_j(q_i·k_j/√HS) over visible j.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double drop,
                              uint64_t seed, uint64_t offset) {
  const int64_t b = q.size(0), nh = q.size(1), t = q.size(2), hs = q.size(3);
  const std::vector<double> vq = q.to_vector(), vk = k.to_vector(), vv = v.to_vector();
  std::vector<double> out(vq.size(), 0.0);
  for (int64_t bh = 0; bh < b * nh; ++bh)
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> p(static_cast<size_t>(t), 0.0);
      double mx = -INFINITY, total = 0.0;
      for (int64_t j = 0; j < t; ++j) {
        if (causal && j > i) continue;
        double s = 0.0;
        for (int64_t d = 0; d < hs; ++d) s += vq[static_cast<size_t>((bh * t + i) * hs + d)] * vk[static_cast<size_t>((bh * t + j) * hs + d)];
        p[static_cast<size_t>(j)] = s / std::sqrt(static_cast<double>(hs));
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j < t; ++j) {
        if (causal && j > i) {
          p[static_cast<size_t>(j)] = 0.0;
          continue;
        }
        p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx);
        total += p[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < t; ++j) {
        double w = p[static_cast<size_t>(j)] / total;
        if (drop > 0.0) {
          const uint64_t index = static_cast<uint64_t>((bh * t + i) * t + j);
          w = philox::dropout_uniform(seed, offset, index) >= static_cast<float>(drop) ? w / (1.0 - drop) : 0.0;
        }
        for (int64_t d = 0; d < hs; ++d)
          out[static_cast<size_t>((bh * t + i) * hs + d)] += w * vv[static_cast<size_t>((bh * t + j) * hs + d)];
      }
    }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(AttentionTest, MatchesLoopsInF64) {
  Generator gen = test_generator();
  for (bool causal : {false, true}) {
    for (const Shape& s : {Shape{1, 1, 1, 4}, Shape{2, 3, 5, 4}, Shape{1, 2, 9, 7}}) {
      SCOPED_TRACE(shape_str(s) + (causal ? " causal" : ""));
      const Tensor q = random_tensor(s, DType::F64, kCPU, gen), k = random_tensor(s, DType::F64, kCPU, gen),
                   v = random_tensor(s, DType::F64, kCPU, gen);
      EXPECT_LT(max_abs_diff(attention(q, k, v, causal).to_vector(), reference(q, k, v, causal, 0.0, 0, 0)), 1e-12);
    }
  }
}

TEST(AttentionTest, DropoutFollowsThePhiloxContract) {
  Generator gen = test_generator();
  const Shape s{2, 2, 6, 4};
  const Tensor q = random_tensor(s, DType::F64, kCPU, gen), k = random_tensor(s, DType::F64, kCPU, gen),
               v = random_tensor(s, DType::F64, kCPU, gen);
  const uint64_t seed = test_seed(), offset = 4 * 11;
  const Tensor y = attention(q, k, v, true, 0.3, seed, philox_offset(offset, kCPU));
  EXPECT_LT(max_abs_diff(y.to_vector(), reference(q, k, v, true, 0.3, seed, offset)), 1e-12);
  EXPECT_GT(max_abs_diff(y.to_vector(), attention(q, k, v, true).to_vector()), 1e-3) << "dropout changed nothing";
}

TEST(AttentionTest, GradCheckF64) {
  Generator gen = test_generator();
  const Shape s{1, 2, 4, 3};
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    EXPECT_TRUE(gradcheck(
        [causal](const std::vector<Tensor>& in) {
          return attention(in[0], in[1], in[2], causal, 0.25, 7, philox_offset(8, kCPU));
        },
        {random_tensor(s, DType::F64, kCPU, gen), random_tensor(s, DType::F64, kCPU, gen),
         random_tensor(s, DType::F64, kCPU, gen)},
        gen));
  }
}

TEST(AttentionTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor q = random_tensor({1, 2, 4, 3}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(attention(q, random_tensor({1, 2, 5, 3}, DType::F32, kCPU, gen), q, true), "attention");
  EXPECT_FT_ERROR(attention(q, q, q.to(DType::F64), true), "attention");
  EXPECT_FT_ERROR(attention(q, q, q, true, 0.5), "offset");
  EXPECT_FT_ERROR(attention(q.reshape({2, 4, 3}), q.reshape({2, 4, 3}), q.reshape({2, 4, 3}), false), "attention");
}

class AttentionDeviceTest : public DeviceModeTest {};

TEST_P(AttentionDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (causal ? " causal" : ""));
      const Shape s{2, 3, 33, 16};
      EXPECT_TRUE(matches_f64_reference(
          [causal](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], causal); },
          {random_tensor(s, DType::F64, kCPU, gen), random_tensor(s, DType::F64, kCPU, gen),
           random_tensor(s, DType::F64, kCPU, gen)},
          device(), dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AttentionDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// The documented qkv layout, by loops: q, k, v are the three C-wide thirds, head h their
// columns [h·HS, (h+1)·HS); the result puts head h back in columns [h·HS, (h+1)·HS).
TEST(AttentionTest, QkvLayoutMatchesSplitHeadsByLoops) {
  Generator gen = test_generator();
  const int64_t b = 2, t = 5, heads = 3, hs = 4, c = heads * hs;
  const Tensor qkv = random_tensor({b, t, 3 * c}, DType::F64, kCPU, gen);
  const std::vector<double> all = qkv.to_vector();
  std::vector<double> parts[3];
  for (int which = 0; which < 3; ++which)
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t d = 0; d < hs; ++d)
            parts[which].push_back(all[static_cast<size_t>((bi * t + ti) * 3 * c + which * c + h * hs + d)]);
  const Shape s{b, heads, t, hs};
  const std::vector<double> by_head =
      attention(Tensor::from_vector(parts[0], s, DType::F64), Tensor::from_vector(parts[1], s, DType::F64),
                Tensor::from_vector(parts[2], s, DType::F64), true)
          .to_vector();
  const std::vector<double> merged = attention_qkv(qkv, heads, true).to_vector();
  ASSERT_EQ(merged.size(), by_head.size());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t ti = 0; ti < t; ++ti)
        for (int64_t d = 0; d < hs; ++d)
          EXPECT_EQ(merged[static_cast<size_t>((bi * t + ti) * c + h * hs + d)],
                    by_head[static_cast<size_t>(((bi * heads + h) * t + ti) * hs + d)]);
}

// ---- the fused flash kernels

std::vector<Tensor> random_qkv(const Shape& s, Generator& gen) {
  return {random_tensor(s, DType::F64, kCPU, gen), random_tensor(s, DType::F64, kCPU, gen),
          random_tensor(s, DType::F64, kCPU, gen)};
}

TEST(AttentionFusedTest, MatchesTwinAndF64Reference) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (int64_t hs : {64, 128})
    for (int64_t t : {1, 77, 130, 1024})
      for (bool causal : {false, true}) {
        if (t == 1024 && hs == 128) continue;
        SCOPED_TRACE("HS " + std::to_string(hs) + " T " + std::to_string(t) + (causal ? " causal" : ""));
        const Shape s{t == 1024 ? 1 : 2, 2, t, hs};
        const auto inputs = random_qkv(s, gen);
        auto f = [causal](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], causal); };
        EXPECT_TRUE(fused_matches_twin(f, inputs, DType::BF16, gen, forward_tolerance(DType::BF16)));
        KernelModeGuard fused(KernelMode::Fused);
        if (t < 1024) {
          EXPECT_TRUE(matches_f64_reference(f, inputs, kCUDA, DType::BF16, gen, forward_tolerance(DType::BF16),
                                            grad_tolerance(DType::BF16)));
        }
        const Tensor q = fresh_leaf(inputs[0], DType::BF16, kCUDA);
        EXPECT_EQ(graph_size(attention(q, q, q, causal)), 1u) << "the fused kernel did not run";
      }
}

TEST(AttentionFusedTest, QkvLayoutMatchesTwin) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (int64_t heads : {1, 2})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::to_string(heads) + " heads" + (causal ? " causal" : ""));
      const Tensor qkv = random_tensor({2, 77, 3 * 128}, DType::F64, kCPU, gen);  // HS 128 or 64
      auto f = [heads, causal](const std::vector<Tensor>& in) { return attention_qkv(in[0], heads, causal); };
      EXPECT_TRUE(fused_matches_twin(f, {qkv}, DType::BF16, gen, forward_tolerance(DType::BF16)));
      KernelModeGuard fused(KernelMode::Fused);
      EXPECT_TRUE(matches_f64_reference(f, {qkv}, kCUDA, DType::BF16, gen, forward_tolerance(DType::BF16),
                                        grad_tolerance(DType::BF16)));
    }
}

// With v the identity (v[j] = e_j), output row i is the dropped probability row itself, so a
// zero marks a dropped element exactly: the fused kernel's masks, the twin's on CUDA and the
// CPU's must coincide bit for bit (not just within a tolerance).
TEST(AttentionFusedTest, DropoutMasksAreIdenticalAcrossPaths) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  const double p = 0.3;
  const uint64_t seed = test_seed(5), offset = 4 * 1001;
  for (int64_t hs : {64, 128}) {
    const int64_t t = hs == 64 ? 64 : 100, heads = 2;
    SCOPED_TRACE("HS " + std::to_string(hs));
    std::vector<double> eye(static_cast<size_t>(heads * t * hs), 0.0);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < t; ++j) eye[static_cast<size_t>((h * t + j) * hs + j)] = 1.0;
    const Tensor v = Tensor::from_vector(eye, {1, heads, t, hs}, DType::F64);
    const Tensor q = random_tensor({1, heads, t, hs}, DType::F64, kCPU, gen),
                 k = random_tensor({1, heads, t, hs}, DType::F64, kCPU, gen);
    auto dropped = [&](Device device, DType dtype, KernelMode mode) {
      KernelModeGuard guard(mode);
      const Tensor y = attention(fresh_copy(q, dtype, device), fresh_copy(k, dtype, device), fresh_copy(v, dtype, device), false, p, seed,
                                 philox_offset(offset, device));
      std::vector<bool> zero;
      const std::vector<double> values = y.to_vector();
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < t; ++i)
          for (int64_t j = 0; j < t; ++j)
            zero.push_back(values[static_cast<size_t>((h * t + i) * hs + j)] == 0.0);
      return zero;
    };
    const std::vector<bool> fused = dropped(kCUDA, DType::BF16, KernelMode::Fused);
    EXPECT_EQ(fused, dropped(kCUDA, DType::BF16, KernelMode::Unfused)) << "fused vs twin on CUDA";
    {
      FlashKernelsGuard mma_sync(FlashKernels::MmaSync);  // the default runs Hopper's on sm_90
      EXPECT_EQ(fused, dropped(kCUDA, DType::BF16, KernelMode::Fused)) << "the two fused forwards";
    }
    EXPECT_EQ(fused, dropped(kCPU, DType::F64, KernelMode::Fused)) << "fused vs the CPU";
    const double share = static_cast<double>(std::count(fused.begin(), fused.end(), true)) / fused.size();
    EXPECT_NEAR(share, p, 0.05) << "dropped share";
  }
}

TEST(AttentionFusedTest, DropoutGradientsMatchTwin) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (int64_t hs : {64, 128})
    for (bool causal : {false, true}) {
      SCOPED_TRACE("HS " + std::to_string(hs) + (causal ? " causal" : ""));
      auto f = [&](const std::vector<Tensor>& in) {
        return attention(in[0], in[1], in[2], causal, 0.2, 99, philox_offset(4 * 77, in[0].device()));
      };
      EXPECT_TRUE(fused_matches_twin(f, random_qkv({2, 2, 93, hs}, gen), DType::BF16, gen,
                                     forward_tolerance(DType::BF16)));
    }
}

// The backward adds each query tile's dQ shares through a turn counter, in a fixed order. At
// the GPT-2 shape (with fewer batches) the blocks span several waves, so a block waits on
// blocks that started well before it: a missed turn or a read of a half-written sum would
// show as gradients that differ between two runs of the same inputs, or from the twin's.
TEST(AttentionFusedTest, BackwardIsBitReproducibleAcrossWaves) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  struct Case {
    int64_t batch, heads, tokens, head_size;
    bool causal;
  };
  for (const Case& c : {Case{4, 12, 1024, 64, true}, Case{2, 12, 1024, 64, false}, Case{3, 8, 1000, 128, true},
                      Case{2, 4, 777, 128, false}}) {
    SCOPED_TRACE("HS " + std::to_string(c.head_size) + " T " + std::to_string(c.tokens) +
                 (c.causal ? " causal" : ""));
    const auto inputs = random_qkv({c.batch, c.heads, c.tokens, c.head_size}, gen);
    const Tensor upstream = random_tensor({c.batch, c.heads, c.tokens, c.head_size}, DType::F64, kCPU, gen);
    auto f = [&](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], c.causal); };
    GradRun runs[2];
    {
      KernelModeGuard fused(KernelMode::Fused);
      for (GradRun& run : runs) run = run_with_grads(f, inputs, DType::BF16, kCUDA, upstream);
    }
    KernelModeGuard twin(KernelMode::Unfused);
    const GradRun reference = run_with_grads(f, inputs, DType::BF16, kCUDA, upstream);
    for (size_t i = 0; i < 3; ++i) {
      SCOPED_TRACE("gradient " + std::to_string(i));
      EXPECT_EQ(runs[0].grads[i].to_vector(), runs[1].grads[i].to_vector()) << "two runs differ";
      EXPECT_TRUE(all_close(runs[0].grads[i], reference.grads[i], 0.02)) << "fused vs twin";
    }
  }
}

// On sm_90 the tests above run the Hopper kernels (the default, at both head sizes); here
// the mma.sync kernels, which every other device runs, against the f64 reference, and the two
// against each other on the same inputs: outputs and gradients. Shapes cover partial query and
// key tiles, several query tiles per head, both head sizes, dropout and the fused QKV layout.
TEST(AttentionFusedTest, HopperAndMmaSyncKernelsAgree) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  if (!hopper_flash_available()) GTEST_SKIP() << "no Hopper kernels on this build or device";
  Generator gen = test_generator();
  KernelModeGuard fused(KernelMode::Fused);
  {
    FlashKernelsGuard mma_sync(FlashKernels::MmaSync);
    const auto inputs = random_qkv({2, 2, 77, 64}, gen);
    auto f = [](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], true); };
    EXPECT_TRUE(matches_f64_reference(f, inputs, kCUDA, DType::BF16, gen, forward_tolerance(DType::BF16),
                                      grad_tolerance(DType::BF16)));
  }
  struct Case {
    int64_t batch, heads, tokens, head_size;
    bool causal;
    double dropout;
  };
  // Both forwards start causal blocks in groups of heads (lib/causal_order.h): on an H100 the model
  // groups the Hopper forward's 35 heads at T 1024 by 4 and, with dropout (one block a
  // multiprocessor), 45 heads at T 512 by 23, so both leave a short last group.
  const Case cases[] = {{2, 2, 1, 64, true, 0.0},     {2, 3, 77, 64, false, 0.0},  {1, 2, 200, 64, true, 0.1},
                        {2, 12, 1024, 64, true, 0.0}, {1, 4, 300, 128, true, 0.0}, {2, 2, 130, 128, false, 0.2},
                        {1, 6, 1024, 128, true, 0.0}, {5, 7, 1024, 64, true, 0.0}, {5, 9, 512, 128, true, 0.1}};
  for (const Case& c : cases) {
    SCOPED_TRACE("B " + std::to_string(c.batch) + " NH " + std::to_string(c.heads) + " T " +
                 std::to_string(c.tokens) + " HS " + std::to_string(c.head_size) + (c.causal ? " causal" : "") +
                 " dropout " + std::to_string(c.dropout));
    const Shape shape{c.batch, c.heads, c.tokens, c.head_size};
    const auto inputs = random_qkv(shape, gen);
    const Tensor upstream = random_tensor(shape, DType::F64, kCPU, gen);
    auto f = [&](const std::vector<Tensor>& in) {
      return attention(in[0], in[1], in[2], c.causal, c.dropout, 21, philox_offset(4 * 3, in[0].device()));
    };
    GradRun runs[2];
    for (int hopper = 0; hopper < 2; ++hopper) {
      FlashKernelsGuard choice(hopper ? FlashKernels::PreferHopper : FlashKernels::MmaSync);
      runs[hopper] = run_with_grads(f, inputs, DType::BF16, kCUDA, upstream);
    }
    EXPECT_TRUE(all_close(runs[1].y, runs[0].y, 0.01)) << "outputs";
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(all_close(runs[1].grads[i], runs[0].grads[i], 0.02)) << "gradient " << i;
  }
  // The fused QKV layout at the GPT-2 head count: TMA reads the heads out of the [B, T, 3C] rows.
  const std::vector<Tensor> qkv = {random_tensor({2, 150, 3 * 12 * 64}, DType::F64, kCPU, gen)};
  const Tensor upstream = random_tensor({2, 150, 12 * 64}, DType::F64, kCPU, gen);
  auto f = [](const std::vector<Tensor>& in) { return attention_qkv(in[0], 12, true); };
  GradRun runs[2];
  for (int hopper = 0; hopper < 2; ++hopper) {
    FlashKernelsGuard choice(hopper ? FlashKernels::PreferHopper : FlashKernels::MmaSync);
    runs[hopper] = run_with_grads(f, qkv, DType::BF16, kCUDA, upstream);
  }
  EXPECT_TRUE(all_close(runs[1].y, runs[0].y, 0.01)) << "attention_qkv";
  EXPECT_TRUE(all_close(runs[1].grads[0], runs[0].grads[0], 0.02)) << "attention_qkv gradient";
}

TEST(AttentionFusedTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor qkv = random_tensor({2, 5, 12}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(attention_qkv(qkv, 3, true), "attention_qkv");            // 12 is not 3 × a multiple of 3
  EXPECT_FT_ERROR(attention_qkv(qkv.reshape({10, 12}), 2, true), "[B, T, 3C]");
  EXPECT_FT_ERROR(attention_qkv(qkv, 2, true, 0.1, 0, philox_offset(0, kCPU).to(DType::F32)), "offset");
}

// qkv_attention: the QKV projection and the attention as one op. On the CPU it is its twin; a
// gradient check in f64. On CUDA (bf16), against the twin for every input's gradient, with the
// Hopper backward and the mma.sync one, whose Δ and dQ kernels give the projection's bias
// gradient by chunks of 128 tokens (partial chunks at T 77 and 300, one chunk at 1, GPT-2's 12
// heads at 150), or with dropout do not (the projection then runs BGRADB). On the same leaves
// and upstream gradient against the two separate ops (BGRADB's sums of the same dqkv): q's part
// within f32 summation (the same dq); v's, dO's column sums, within dv's bf16 rounding; k's is
// exactly 0 where BGRADB's is rounding noise, small beside v's. With dropout all of it within
// f32 summation.
std::vector<Tensor> projection_inputs(int64_t batch, int64_t tokens, int64_t in, int64_t channels, Generator& gen) {
  return {random_tensor({batch, tokens, in}, DType::F64, kCPU, gen),
          uniform_tensor({3 * channels, in}, DType::F64, kCPU, gen, -0.2, 0.2),
          random_tensor({3 * channels}, DType::F64, kCPU, gen)};
}

TEST(QkvAttentionTest, CpuIsTheTwinAndPassesAGradientCheck) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = projection_inputs(2, 5, 6, 8, gen);
  EXPECT_TRUE(all_equal(qkv_attention(in[0], in[1], in[2], 2, true),
                        qkv_attention_composite(in[0], in[1], in[2], 2, true, 0.0, 0, Tensor())));
  auto f = [](const std::vector<Tensor>& x) { return qkv_attention(x[0], x[1], x[2], 2, true); };
  EXPECT_TRUE(gradcheck(f, projection_inputs(1, 4, 3, 4, gen), gen));
}

TEST(QkvAttentionFusedTest, AgreesWithTheTwinAndSumsTheBiasGradient) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  struct Case {
    int64_t batch, tokens, in, heads, head_size;
    bool causal;
    double dropout;
  };
  const Case cases[] = {{2, 77, 64, 2, 64, true, 0.0}, {1, 300, 96, 2, 128, true, 0.1}, {2, 1, 32, 1, 64, false, 0.0},
                        {2, 150, 64, 12, 64, true, 0.0}, {1, 256, 64, 2, 64, false, 0.2}};
  for (const bool hopper : {true, false})
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(hopper ? "Hopper" : "mma.sync") + " B " + std::to_string(c.batch) + " T " +
                   std::to_string(c.tokens) + " IN " + std::to_string(c.in) + " NH " + std::to_string(c.heads) +
                   " HS " + std::to_string(c.head_size) + (c.causal ? " causal" : "") + " dropout " +
                   std::to_string(c.dropout));
      FlashKernelsGuard choice(hopper ? FlashKernels::PreferHopper : FlashKernels::MmaSync);
      const int64_t channels = c.heads * c.head_size;
      const std::vector<Tensor> inputs = projection_inputs(c.batch, c.tokens, c.in, channels, gen);
      auto fused = [&](const std::vector<Tensor>& x) {
        return qkv_attention(x[0], x[1], x[2], c.heads, c.causal, c.dropout, 21, philox_offset(8 * 3, x[0].device()));
      };
      auto apart = [&](const std::vector<Tensor>& x) {
        return attention_qkv(linear(x[0], x[1], x[2]), c.heads, c.causal, c.dropout, 21,
                             philox_offset(8 * 3, x[0].device()));
      };
      EXPECT_TRUE(fused_matches_twin(fused, inputs, DType::BF16, gen, grad_tolerance(DType::BF16)));
      KernelModeGuard fused_mode(KernelMode::Fused);
      const Tensor upstream = random_tensor({c.batch, c.tokens, channels}, DType::F64, kCPU, gen);
      const GradRun one = run_with_grads(fused, inputs, DType::BF16, kCUDA, upstream);
      const GradRun two = run_with_grads(apart, inputs, DType::BF16, kCUDA, upstream);
      EXPECT_EQ(graph_size(one.y), 2u) << "the fused op did not run (the projection's node and the attention's)";
      EXPECT_TRUE(all_equal(one.y, two.y));
      EXPECT_TRUE(all_equal(one.grads[0], two.grads[0])) << "dx";
      if (c.dropout > 0.0) {
        EXPECT_TRUE(all_close(one.grads[2], two.grads[2], 1e-5)) << "the bias gradient (BGRADB's)";
        continue;
      }
      auto part = [channels](const Tensor& bias_grad, int64_t third) {
        return fresh_copy(bias_grad, DType::F64, kCPU).narrow(0, third * channels, channels);
      };
      EXPECT_TRUE(all_close(part(one.grads[2], 0), part(two.grads[2], 0), 1e-5)) << "q's part";
      EXPECT_TRUE(all_close(part(one.grads[2], 2), part(two.grads[2], 2), 2e-2)) << "v's part";
      EXPECT_TRUE(all_equal(part(one.grads[2], 1), Tensor::zeros({channels}, DType::F64))) << "k's part";
      EXPECT_LE(norm_of(part(two.grads[2], 1).to_vector()), 0.05 * norm_of(part(two.grads[2], 2).to_vector()))
          << "BGRADB's k part is not rounding noise";
    }
}

}  // namespace
}  // namespace ft
