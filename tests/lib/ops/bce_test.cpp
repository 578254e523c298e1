// binary_cross_entropy_with_logits: against the textbook formula in f64 (logits up to ±40,
// where the naive form overflows), gradients by central differences, the fused kernel against
// the f64 reference and the twin, a gradient scaled by a non-unit upstream, and bad inputs.
#include <cmath>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/bce/bce.h"
#include "lib/ops/elementwise/elementwise.h"
#include "tests/lib/fused_test_util.h"

namespace ft {
namespace {

using namespace ft::test;

Tensor random_labels(int64_t n, Generator& gen) {
  std::vector<double> v = Tensor::rand({n}, gen, DType::F64, kCPU).to_vector();
  for (double& y : v) y = y < 0.3 ? 1.0 : 0.0;
  return Tensor::from_vector(v, {n}, DType::F64);
}

TEST(BceTest, MatchesFormulaInF64) {
  Generator gen = test_generator();
  const Tensor x = uniform_tensor({200}, DType::F64, kCPU, gen, -40.0, 40.0);
  const Tensor y = random_labels(200, gen);
  const std::vector<double> vx = x.to_vector(), vy = y.to_vector();
  double expected = 0;
  for (size_t i = 0; i < vx.size(); ++i) {
    // −y log σ(x) − (1 − y) log(1 − σ(x)), with log σ(x) = −log1p(e^−x) written for both signs.
    const double log_p = vx[i] >= 0 ? -std::log1p(std::exp(-vx[i])) : vx[i] - std::log1p(std::exp(vx[i]));
    const double log_q = vx[i] >= 0 ? -vx[i] - std::log1p(std::exp(-vx[i])) : -std::log1p(std::exp(vx[i]));
    expected -= vy[i] * log_p + (1 - vy[i]) * log_q;
  }
  expected /= static_cast<double>(vx.size());
  EXPECT_NEAR(binary_cross_entropy_with_logits(x.reshape({200, 1}), y).item(), expected, 1e-12 * std::abs(expected));
}

TEST(BceTest, GradCheckF64) {
  Generator gen = test_generator();
  const Tensor y = random_labels(7, gen);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], y); },
                        {uniform_tensor({7}, DType::F64, kCPU, gen, -4, 4)}, gen));
}

TEST(BceTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({4, 1}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(binary_cross_entropy_with_logits(random_tensor({4, 2}, DType::F32, kCPU, gen), Tensor::zeros({8})),
                  "[N, 1]");
  EXPECT_FT_ERROR(binary_cross_entropy_with_logits(x, Tensor::zeros({5})), "targets");
  EXPECT_FT_ERROR(binary_cross_entropy_with_logits(x, Tensor::zeros({4}, DType::I64)), "floating");
}

class BceDeviceTest : public DeviceModeTest {};

TEST_P(BceDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (int64_t n : {5000, 3})
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " N " + std::to_string(n));
      // Labels stay f32 (the fused kernel's input) whatever the logits' dtype.
      EXPECT_TRUE(matches_f64_reference(
          [](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], cast(in[1], DType::F32)); },
          {uniform_tensor({n, 1}, DType::F64, kCPU, gen, -30, 30), random_labels(n, gen)}, device(), dtype, gen,
          forward_tolerance(dtype), grad_tolerance(dtype), {true, false}));
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, BceDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

TEST(BceFusedTest, MatchesTwinAndScalesByTheUpstream) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  auto f = [](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], cast(in[1], DType::F32)); };
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    // fused_matches_twin backs a random (non-unit) upstream through both paths.
    EXPECT_TRUE(fused_matches_twin(f, {uniform_tensor({8192}, DType::F64, kCPU, gen, -8, 8), random_labels(8192, gen)},
                                   dtype, gen, forward_tolerance(dtype), {true, false}));
  }
  KernelModeGuard fused(KernelMode::Fused);
  Tensor x = fresh_leaf(random_tensor({64}, DType::F64, kCPU, gen), DType::F32, kCUDA);
  const Tensor loss = binary_cross_entropy_with_logits(x, fresh_copy(random_labels(64, gen), DType::F32, kCUDA));
  EXPECT_EQ(graph_size(loss), 1u) << "the fused kernel did not run";
}

}  // namespace
}  // namespace ft
