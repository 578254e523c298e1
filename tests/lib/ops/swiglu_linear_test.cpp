// swiglu_linear (silu(a)·b · Wᵀ, the down projection of a SwiGLU MLP). On the CPU it must be its
// composite twin and match a loop written here, with a gradient check in f64; on CUDA, in both
// kernel modes and in f32 and bf16, it must match the CPU f64 reference in forward and every
// gradient, agree with the twin on the same inputs, write W's gradient into a flat f32 view as
// the linear layers do, and keep no [N, H] activation for backward. Dimension letters: N rows, H
// the SwiGLU width (the product's inner dimension), OUT the outputs.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "lib/grad_buffer.h"
#include "lib/ops/bias_act/bias_act.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/swiglu_linear/swiglu_linear.h"
#include "lib/runtime.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

struct SwigluLinearCase {
  Shape a;  // [..., H]
  int64_t out;
};

// One row, odd H and OUT, a 3-D input, and a Llama-like width (H 1024, OUT 256).
std::vector<SwigluLinearCase> cases() { return {{{1, 64}, 8}, {{37, 96}, 40}, {{2, 5, 64}, 24}, {{64, 1024}, 256}}; }

/// a of scale 2 reaches both tails of silu; W scaled by 1/√H keeps the outputs of order one.
std::vector<Tensor> case_inputs(const SwigluLinearCase& c, Generator& gen) {
  const int64_t h = c.a.back();
  return {affine(random_tensor(c.a, DType::F64, kCPU, gen), 2.0, 0.0), random_tensor(c.a, DType::F64, kCPU, gen),
          affine(random_tensor({c.out, h}, DType::F64, kCPU, gen), 1.0 / std::sqrt(static_cast<double>(h)), 0.0)};
}

std::string case_name(const SwigluLinearCase& c) {
  return "a " + shape_str(c.a) + " OUT " + std::to_string(c.out);
}

Tensor run(const std::vector<Tensor>& in) { return swiglu_linear(in[0], in[1], in[2]); }

// ---- on the CPU

TEST(SwigluLinearTest, CpuF64MatchesLoop) {
  Generator gen = test_generator();
  const SwigluLinearCase c{{5, 7}, 3};
  const std::vector<Tensor> in = case_inputs(c, gen);
  const std::vector<double> a = in[0].to_vector(), b = in[1].to_vector(), w = in[2].to_vector();
  const std::vector<double> y = swiglu_linear(in[0], in[1], in[2]).to_vector();
  ASSERT_EQ(y.size(), 15u);
  for (size_t r = 0; r < 5; ++r)
    for (size_t o = 0; o < 3; ++o) {
      double expected = 0;
      for (size_t j = 0; j < 7; ++j) {
        const double v = a[r * 7 + j];
        expected += v / (1.0 + std::exp(-v)) * b[r * 7 + j] * w[o * 7 + j];
      }
      EXPECT_NEAR(y[r * 3 + o], expected, 1e-12 * (1.0 + std::abs(expected))) << "row " << r << " out " << o;
    }
}

TEST(SwigluLinearTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = case_inputs({{6, 16}, 5}, gen);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    KernelModeGuard guard(mode);
    EXPECT_TRUE(all_equal(run(in), swiglu_linear_composite(in[0], in[1], in[2]))) << kernel_mode_name(mode);
  }
}

TEST(SwigluLinearTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const SwigluLinearCase& c : {SwigluLinearCase{{3, 6}, 4}, SwigluLinearCase{{2, 2, 5}, 3}}) {
    SCOPED_TRACE(case_name(c));
    EXPECT_TRUE(gradcheck(run, case_inputs(c, gen), gen));
  }
}

TEST(SwigluLinearTest, Contracts) {
  const Tensor a = Tensor::zeros({4, 6}), w = Tensor::zeros({3, 6});
  EXPECT_FT_ERROR(swiglu_linear(a, Tensor::zeros({4, 5}), w), "swiglu_linear: a [4, 6]");
  EXPECT_FT_ERROR(swiglu_linear(a, a, Tensor::zeros({3, 5})), "swiglu_linear: weight must be [OUT, 6]");
  EXPECT_FT_ERROR(swiglu_linear(a, a, Tensor::zeros({6})), "swiglu_linear: weight must be");
  EXPECT_FT_ERROR(swiglu_linear(a, a, Tensor::zeros({3, 6}, DType::F64)), "swiglu_linear: weight is f64");
  EXPECT_FT_ERROR(swiglu_linear(Tensor(), a, w), "swiglu_linear");
}

// ---- every device and kernel mode against the CPU f64 reference

class SwigluLinearDeviceTest : public DeviceModeTest {};

TEST_P(SwigluLinearDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const SwigluLinearCase& c : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c));
      EXPECT_TRUE(matches_f64_reference(run, case_inputs(c, gen), device(), dtype, gen, forward_tolerance(dtype),
                                        grad_tolerance(dtype)));
    }
  }
}

// A frozen weight (LoRA's base), or inputs that need no gradient: the fused backward skips what
// is not asked for and still produces the rest.
TEST_P(SwigluLinearDeviceTest, PartialGradientsMatchF64Reference) {
  Generator gen = test_generator();
  const SwigluLinearCase c{{37, 96}, 40};
  for (DType dtype : fused_dtypes()) {
    for (const std::vector<bool>& wrt : {std::vector<bool>{true, true, false}, std::vector<bool>{false, false, true},
                                         std::vector<bool>{false, true, true}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " wrt " + std::to_string(wrt[0]) + std::to_string(wrt[1]) +
                   std::to_string(wrt[2]));
      EXPECT_TRUE(matches_f64_reference(run, case_inputs(c, gen), device(), dtype, gen, forward_tolerance(dtype),
                                        grad_tolerance(dtype), wrt));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SwigluLinearDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// ---- the fused CUDA path against its twin

TEST(SwigluLinearFusedVsTwinTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const SwigluLinearCase& c : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c));
      EXPECT_TRUE(fused_matches_twin(run, case_inputs(c, gen), dtype, gen, grad_tolerance(dtype)));
    }
  }
}

// W's gradient goes straight into its flat f32 view (as a Trainer's GradBuffer hands out), and a
// second backward adds into it: both equal the twin's gradient through a view of its own.
TEST(SwigluLinearFusedVsTwinTest, WeightGradientIntoItsFlatView) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  const std::vector<Tensor> in = case_inputs({{64, 1024}, 256}, gen);
  const Tensor a = fresh_copy(in[0], DType::BF16, kCUDA), b = fresh_copy(in[1], DType::BF16, kCUDA);
  const Tensor upstream = random_tensor({64, 256}, DType::BF16, kCUDA, gen);
  Tensor grads[2][2];
  for (int fused = 0; fused < 2; ++fused) {
    KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
    Tensor w = fresh_leaf(in[2], DType::BF16, kCUDA);
    GradBuffer buffer(std::vector<Tensor>{w});
    for (int pass = 0; pass < 2; ++pass) {
      swiglu_linear(a, b, w).backward(upstream);
      ASSERT_EQ(w.grad().dtype(), DType::F32);
      grads[fused][pass] = cast(w.grad(), DType::F64);
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "one backward" : "two backwards");
    EXPECT_TRUE(all_close(grads[1][pass], grads[0][pass], 1e-2)) << "fused dW against the twin's";
  }
  EXPECT_TRUE(all_close(grads[1][1], grads[1][0] * 2.0, 1e-5)) << "the second backward adds";
}

// What the op keeps for backward, measured as device memory still in use after forward: the
// twin keeps h = silu(a)·b and silu(a) (both [N, H]); the fused path only the output beside its
// inputs, and still gives the twin's gradients.
TEST(SwigluLinearMemoryTest, FusedKeepsNoActivation) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  const int64_t n = 512, h = 2048, out = 128;
  Generator gen = test_generator();
  const std::vector<Tensor> in = case_inputs({{n, h}, out}, gen);
  const size_t activation_bytes = static_cast<size_t>(n * h) * dtype_size(DType::BF16);
  const size_t output_bytes = static_cast<size_t>(n * out) * dtype_size(DType::BF16);
  size_t kept[2];
  for (int fused = 0; fused < 2; ++fused) {
    KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
    std::vector<Tensor> leaves;
    for (const Tensor& x : in) leaves.push_back(fresh_leaf(x, DType::BF16, kCUDA));
    synchronize();
    const size_t before = device_memory_in_use();
    const Tensor y = run(leaves);
    synchronize();
    kept[fused] = device_memory_in_use() - before;
    y.backward(random_tensor(y.shape(), DType::BF16, kCUDA, gen));
    EXPECT_TRUE(leaves[0].grad().defined() && leaves[1].grad().defined() && leaves[2].grad().defined());
  }
  RecordProperty("twin_kept_bytes", std::to_string(kept[0]));
  RecordProperty("fused_kept_bytes", std::to_string(kept[1]));
  EXPECT_GE(kept[0], output_bytes + 2 * activation_bytes) << "the twin keeps h and silu(a), or the counter misses them";
  EXPECT_LT(kept[1], output_bytes + activation_bytes / 2) << "fused kept " << kept[1] << " bytes";
}

// Which path ran shows in the graph: one node fused on CUDA, the twin's primitives elsewhere.
TEST(SwigluLinearFusedVsTwinTest, FusedModeRecordsFewerNodesOnCudaOnly) {
  Generator gen = test_generator();
  expect_fewer_nodes_fused_on_cuda_only(run, case_inputs({{37, 96}, 40}, gen));
}

}  // namespace
}  // namespace ft
