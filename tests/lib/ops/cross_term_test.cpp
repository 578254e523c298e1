// cross_term (DCNv2's x0 ⊙ (y + bias) + x): against a loop in f64, gradients by central
// differences, the fused kernels against the f64 reference (widths that pack and odd ones) and
// against the twin at DLRMv2's width (27 vectors of 128), and bad inputs. Then the cross
// network built on it: its layers against the formula written out with matmuls.
#include <vector>

#include "layers/cross_network.h"
#include "lib/kernel_mode.h"
#include "lib/ops/cross_term/cross_term.h"
#include "lib/ops/matmul/matmul.h"
#include "tests/lib/fused_test_util.h"

namespace ft {
namespace {

using namespace ft::test;

TEST(CrossTermTest, MatchesALoopInF64) {
  Generator gen = test_generator();
  const int64_t b = 3, w = 7;
  const Tensor x0 = random_tensor({b, w}, DType::F64, kCPU, gen), y = random_tensor({b, w}, DType::F64, kCPU, gen),
               bias = random_tensor({w}, DType::F64, kCPU, gen), x = random_tensor({b, w}, DType::F64, kCPU, gen);
  const std::vector<double> out = cross_term(x0, y, bias, x).to_vector(), a = x0.to_vector(), v = y.to_vector(),
                            c = bias.to_vector(), s = x.to_vector();
  for (int64_t i = 0; i < b * w; ++i) {
    const size_t k = static_cast<size_t>(i);
    EXPECT_NEAR(out[k], a[k] * (v[k] + c[k % static_cast<size_t>(w)]) + s[k], 1e-15) << i;
  }
}

TEST(CrossTermTest, GradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return cross_term(in[0], in[1], in[2], in[3]); },
                        {random_tensor({3, 5}, DType::F64, kCPU, gen), random_tensor({3, 5}, DType::F64, kCPU, gen),
                         random_tensor({5}, DType::F64, kCPU, gen), random_tensor({3, 5}, DType::F64, kCPU, gen)},
                        gen));
}

TEST(CrossTermTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor a = random_tensor({2, 4}, DType::F32, kCPU, gen), bias = random_tensor({4}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(cross_term(a, random_tensor({2, 5}, DType::F32, kCPU, gen), bias, a), "[B, W]");
  EXPECT_FT_ERROR(cross_term(a, a, random_tensor({3}, DType::F32, kCPU, gen), a), "bias [W]");
  EXPECT_FT_ERROR(cross_term(a, a, bias, random_tensor({2, 4}, DType::F64, kCPU, gen)), "dtype");
  EXPECT_FT_ERROR(cross_term(a, a, Tensor(), a), "bias");
}

class CrossTermDeviceTest : public DeviceModeTest {};

TEST_P(CrossTermDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  // 3456 = 27 x 128 (DLRMv2's width) and 64 pack; 13 does not.
  for (int64_t w : {int64_t{3456}, int64_t{64}, int64_t{13}})
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " W " + std::to_string(w));
      EXPECT_TRUE(matches_f64_reference(
          [](const std::vector<Tensor>& in) { return cross_term(in[0], in[1], in[2], in[3]); },
          {random_tensor({37, w}, DType::F64, kCPU, gen), random_tensor({37, w}, DType::F64, kCPU, gen),
           random_tensor({w}, DType::F64, kCPU, gen), random_tensor({37, w}, DType::F64, kCPU, gen)},
          device(), dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)));
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, CrossTermDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

TEST(CrossTermFusedTest, MatchesTwinAndIsOneNode) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  auto f = [](const std::vector<Tensor>& in) { return cross_term(in[0], in[1], in[2], in[3]); };
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<Tensor> inputs{random_tensor({700, 3456}, DType::F64, kCPU, gen),
                                     random_tensor({700, 3456}, DType::F64, kCPU, gen),
                                     random_tensor({3456}, DType::F64, kCPU, gen),
                                     random_tensor({700, 3456}, DType::F64, kCPU, gen)};
    EXPECT_TRUE(fused_matches_twin(f, inputs, dtype, gen, forward_tolerance(dtype)));
    KernelModeGuard fused(KernelMode::Fused);
    const GradRun run = run_with_grads(f, inputs, dtype, kCUDA, random_tensor({700, 3456}, DType::F64, kCPU, gen));
    EXPECT_EQ(graph_size(run.y), 1u) << "the fused kernel did not run";
  }
}

// The network: x_{l+1} = x0 ⊙ (x_l · Vᵀ · Uᵀ + b) + x_l, written out with matmuls in f64.
TEST(CrossNetworkTest, LayersFollowTheFormula) {
  Generator gen = test_generator();
  CrossNetwork net({.width = 12, .rank = 4, .layers = 3}, gen);
  net.to(kCPU, DType::F64);
  const auto state = net.state_dict();
  NoGradGuard no_grad;
  // Biases start at zero: give them values so that they are tested.
  for (int l = 0; l < 3; ++l) state.at(std::to_string(l) + ".bias").copy_(random_tensor({12}, DType::F64, kCPU, gen));
  const Tensor x0 = random_tensor({5, 12}, DType::F64, kCPU, gen);
  Tensor x = x0;
  for (int l = 0; l < 3; ++l) {
    const std::string p = std::to_string(l);
    const Tensor y = matmul(matmul(x, state.at(p + ".v.weight"), false, true), state.at(p + ".u.weight"), false, true);
    x = cross_term_composite(x0, y, state.at(p + ".bias"), x);
  }
  EXPECT_TRUE(all_close(net.forward(x0), x, 1e-12));
  EXPECT_EQ(net.parameter_count(), 3 * (12 * 4 * 2 + 12));
  EXPECT_FT_ERROR(net.forward(random_tensor({5, 11}, DType::F64, kCPU, gen)), "[B, 12]");
}

}  // namespace
}  // namespace ft
