// dot_interaction: against loops over the pairs in f64, gradients by central differences, the
// fused kernels against the f64 reference and the twin at DLRM's shapes (27 vectors of 64, of
// 16) and odd ones, and bad inputs.
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/dot_interaction/dot_interaction.h"
#include "tests/lib/fused_test_util.h"

namespace ft {
namespace {

using namespace ft::test;

TEST(DotInteractionTest, MatchesLoopsInF64) {
  Generator gen = test_generator();
  const int64_t b = 3, t = 4, d = 5, f = t + 1;
  const Tensor dense = random_tensor({b, d}, DType::F64, kCPU, gen), sparse = random_tensor({b, t, d}, DType::F64, kCPU, gen);
  const Tensor out = dot_interaction(dense, sparse);
  ASSERT_EQ(out.shape(), (Shape{b, d + f * (f - 1) / 2}));
  const std::vector<double> vd = dense.to_vector(), vs = sparse.to_vector(), vo = out.to_vector();
  auto x = [&](int64_t s, int64_t i, int64_t c) {
    return i == 0 ? vd[static_cast<size_t>(s * d + c)] : vs[static_cast<size_t>((s * t + i - 1) * d + c)];
  };
  const int64_t width = out.size(1);
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t c = 0; c < d; ++c) EXPECT_EQ(vo[static_cast<size_t>(s * width + c)], x(s, 0, c));
    int64_t p = 0;
    for (int64_t i = 1; i < f; ++i)
      for (int64_t j = 0; j < i; ++j, ++p) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += x(s, i, c) * x(s, j, c);
        EXPECT_NEAR(vo[static_cast<size_t>(s * width + d + p)], dot, 1e-12) << "pair " << i << ", " << j;
      }
  }
}

TEST(DotInteractionTest, GradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return dot_interaction(in[0], in[1]); },
                        {random_tensor({2, 3}, DType::F64, kCPU, gen), random_tensor({2, 3, 3}, DType::F64, kCPU, gen)},
                        gen));
}

TEST(DotInteractionTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor dense = random_tensor({2, 4}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(dot_interaction(dense, random_tensor({2, 3, 5}, DType::F32, kCPU, gen)), "[B, T, D]");
  EXPECT_FT_ERROR(dot_interaction(dense, random_tensor({3, 3, 4}, DType::F32, kCPU, gen)), "[B, T, D]");
  EXPECT_FT_ERROR(dot_interaction(dense, random_tensor({2, 3, 4}, DType::F64, kCPU, gen)), "dtype");
}

class DotInteractionDeviceTest : public DeviceModeTest {};

TEST_P(DotInteractionDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  struct Case {
    int64_t b, t, d;
  };
  // bf16 with F <= 32 and D % 16 == 0 takes the tensor-core kernels (F = 27, 16 and 32 below:
  // 16 rows of tiles or 32, the full 32); F = 33, D = 7 and f32 take the block-per-sample ones.
  for (const Case& c : {Case{9, 26, 64}, Case{5, 26, 16}, Case{6, 15, 32}, Case{3, 31, 128}, Case{3, 32, 16},
                        Case{4, 3, 7}})
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " T " + std::to_string(c.t) + " D " + std::to_string(c.d));
      EXPECT_TRUE(matches_f64_reference([](const std::vector<Tensor>& in) { return dot_interaction(in[0], in[1]); },
                                        {random_tensor({c.b, c.d}, DType::F64, kCPU, gen),
                                         random_tensor({c.b, c.t, c.d}, DType::F64, kCPU, gen)},
                                        device(), dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)));
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, DotInteractionDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

TEST(DotInteractionFusedTest, MatchesTwinAndIsOneNode) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  auto f = [](const std::vector<Tensor>& in) { return dot_interaction(in[0], in[1]); };
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<Tensor> inputs{random_tensor({300, 128}, DType::F64, kCPU, gen),
                                     random_tensor({300, 26, 128}, DType::F64, kCPU, gen)};
    EXPECT_TRUE(fused_matches_twin(f, inputs, dtype, gen, forward_tolerance(dtype)));
    KernelModeGuard fused(KernelMode::Fused);
    const GradRun run = run_with_grads(f, inputs, dtype, kCUDA, random_tensor({300, 128 + 351}, DType::F64, kCPU, gen));
    EXPECT_EQ(graph_size(run.y), 1u) << "the fused kernel did not run";
  }
}

}  // namespace
}  // namespace ft
