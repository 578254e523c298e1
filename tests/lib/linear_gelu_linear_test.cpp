// linear_gelu_linear(x, W1, b1, W2, b2) = linear(gelu(linear(x, W1, b1)), W2, b2), fused across
// the two products on CUDA (the GELU's derivative in the second product's DGELU epilogue). On
// every device and kernel mode it must match the CPU f64 reference in forward and in the
// gradients of all five inputs (also when only some of them need one); the fused and unfused
// CUDA paths must agree on the same inputs; and bad shapes are an ft::Error naming the op.
#include <cmath>
#include <string>
#include <vector>

#include "lib/ops/linear.h"
#include "lib/ops/linear_gelu_linear.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

struct MlpCase {
  Shape x;  // [..., IN]
  int64_t hidden, out;
};

std::string case_name(const MlpCase& c) {
  return "x " + shape_str(c.x) + " HIDDEN " + std::to_string(c.hidden) + " OUT " + std::to_string(c.out);
}

// HIDDEN and OUT multiples of 8 reach the fused path (N = 37 and IN = 65 are odd on purpose); a
// 3-D x folds its leading dims; HIDDEN = 30 falls back to the twin.
std::vector<MlpCase> cases() { return {{{37, 65}, 96, 40}, {{2, 5, 64}, 128, 64}, {{37, 65}, 30, 40}}; }

/// x, W1, b1, W2, b2, the weights scaled as an initialization would (1/sqrt(fan in)) so that the
/// pre-activations are of order one, where GELU is not close to linear.
std::vector<Tensor> mlp_inputs(const MlpCase& c, Generator& gen) {
  const int64_t in = c.x.back();
  auto weight = [&](int64_t rows, int64_t cols) {
    return affine(random_tensor({rows, cols}, DType::F64, kCPU, gen), 1.0 / std::sqrt(static_cast<double>(cols)), 0.0);
  };
  return {random_tensor(c.x, DType::F64, kCPU, gen), weight(c.hidden, in),
          random_tensor({c.hidden}, DType::F64, kCPU, gen), weight(c.out, c.hidden),
          random_tensor({c.out}, DType::F64, kCPU, gen)};
}

TensorFn mlp_fn() {
  return [](const std::vector<Tensor>& in) { return linear_gelu_linear(in[0], in[1], in[2], in[3], in[4]); };
}

class LinearGeluLinearDeviceTest : public DeviceModeTest {};

TEST_P(LinearGeluLinearDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const MlpCase& c : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c));
      EXPECT_TRUE(matches_f64_reference(mlp_fn(), mlp_inputs(c, gen), device(), dtype, gen, forward_tolerance(dtype),
                                        grad_tolerance(dtype)));
    }
  }
}

// The backward skips what is not wanted: only the second layer (nothing before the GELU), only
// b1 (the DGELU product still runs, for its bias sum), only x.
TEST_P(LinearGeluLinearDeviceTest, PartialGradientsMatchF64Reference) {
  Generator gen = test_generator();
  const MlpCase c = cases()[0];
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const std::vector<bool>& wrt : {std::vector<bool>{false, false, false, true, true},
                                         std::vector<bool>{false, false, true, false, false},
                                         std::vector<bool>{true, false, false, false, false}}) {
      std::string mask;
      for (bool b : wrt) mask += b ? '1' : '0';
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " wrt " + mask);
      EXPECT_TRUE(matches_f64_reference(mlp_fn(), mlp_inputs(c, gen), device(), dtype, gen, forward_tolerance(dtype),
                                        grad_tolerance(dtype), wrt));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LinearGeluLinearDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// Fused and unfused CUDA paths on the very same inputs: the output and all five gradients agree,
// and only the fused path records the one linear_gelu_linear node.
TEST(LinearGeluLinearFusedVsUnfusedTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::BF16}) {
    const MlpCase c = cases()[1];
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c));
    const std::vector<Tensor> in = mlp_inputs(c, gen);
    Shape out_shape = c.x;
    out_shape.back() = c.out;
    const Tensor upstream = random_tensor(out_shape, dtype, kCUDA, gen);
    std::vector<Tensor> results[2];
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
      std::vector<Tensor> leaves;
      for (const Tensor& t : in) leaves.push_back(fresh_leaf(t, dtype, kCUDA));
      const Tensor y = linear_gelu_linear(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4]);
      ASSERT_NE(y.grad_fn(), nullptr);
      EXPECT_EQ(y.grad_fn()->name == "linear_gelu_linear", fused == 1) << y.grad_fn()->name;
      y.backward(upstream);
      results[fused] = {y};
      for (const Tensor& leaf : leaves) results[fused].push_back(leaf.grad());
    }
    const char* what[] = {"y", "dx", "dW1", "db1", "dW2", "db2"};
    // Two rounding paths over the same inputs (the fused one rounds dy·W2 once, after the
    // GELU's derivative): allow each the dtype's budget.
    const double tol = 2.0 * grad_tolerance(dtype);
    for (int k = 0; k < 6; ++k) EXPECT_TRUE(all_close(results[1][k], results[0][k], tol)) << what[k];
  }
}

TEST(LinearGeluLinearTest, RejectsMismatchedWeights) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = mlp_inputs(cases()[0], gen);
  auto fails_naming_op = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what()).find("linear_gelu_linear") != std::string::npos;
    }
    return false;
  };
  const Tensor wrong_w2 = random_tensor({40, 95}, DType::F64, kCPU, gen);  // HIDDEN is 96
  EXPECT_TRUE(fails_naming_op([&] { linear_gelu_linear(in[0], in[1], in[2], wrong_w2, in[4]); }));
  const Tensor wrong_b2 = random_tensor({41}, DType::F64, kCPU, gen);
  EXPECT_TRUE(fails_naming_op([&] { linear_gelu_linear(in[0], in[1], in[2], in[3], wrong_b2); }));
  const Tensor f32_w2 = in[3].to(DType::F32);
  EXPECT_TRUE(fails_naming_op([&] { linear_gelu_linear(in[0], in[1], in[2], f32_w2, in[4]); }));
  EXPECT_TRUE(fails_naming_op([&] { linear_gelu_linear(in[0], in[3], in[2], in[3], in[4]); }));  // W1 [40, 96]
}

}  // namespace
}  // namespace ft
