// rope: the rotary position embedding. On the CPU it must be its composite twin and match a loop
// written here from the formula, and pass a gradient check in f64; its backward is the rotation
// by the opposite angle. On CUDA, in both kernel modes and in f32 and bf16, it must match the CPU
// f64 reference in forward and backward, and the fused path must agree with the twin on the same
// inputs. Dimension letters: B batch, T tokens, NH heads, HS head size.
#include <cmath>
#include <string>
#include <vector>

#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/ops/rope/rope.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

// HS 2 (one pair), HS 8 (halves too short for a 16-byte pack), HS 64 and 128 (Llama's), an odd
// number of tokens and of heads, and Llama 3's θ.
struct RopeCase {
  Shape x;  // [B, T, NH, HS]
  double theta;
};
std::vector<RopeCase> cases() {
  return {{{1, 3, 1, 2}, 10000.0}, {{2, 5, 3, 8}, 10000.0}, {{2, 33, 4, 64}, 10000.0}, {{1, 17, 2, 128}, 500000.0}};
}
std::string case_name(const RopeCase& c) { return shape_str(c.x) + " theta " + std::to_string(c.theta); }

TensorFn rope_fn(double theta) {
  return [theta](const std::vector<Tensor>& in) { return rope(in[0], theta); };
}

/// The formula, in f64: pair (i, i + HS/2) of token t turned by t·θ^(−2i/HS), or by its opposite.
std::vector<double> rotated(const std::vector<double>& x, const Shape& shape, double theta, double sign) {
  const int64_t tokens = shape[1], heads = shape[2], hs = shape[3], half = hs / 2;
  std::vector<double> y(x.size());
  for (int64_t row = 0; row < shape[0] * tokens * heads; ++row) {
    const int64_t t = (row / heads) % tokens;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = sign * static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / hs);
      const double a = x[static_cast<size_t>(row * hs + i)], b = x[static_cast<size_t>(row * hs + half + i)];
      y[static_cast<size_t>(row * hs + i)] = a * std::cos(angle) - b * std::sin(angle);
      y[static_cast<size_t>(row * hs + half + i)] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  return y;
}

// ---- the CPU

TEST(RopeTest, CpuF64MatchesFormula) {
  Generator gen = test_generator();
  for (const RopeCase& c : cases()) {
    SCOPED_TRACE(case_name(c));
    const Tensor x = random_tensor(c.x, DType::F64, kCPU, gen);
    const Tensor y = rope(x, c.theta);
    ASSERT_EQ(y.shape(), c.x);
    EXPECT_EQ(y.dtype(), DType::F64);
    EXPECT_TRUE(all_close(y, Tensor::from_vector(rotated(x.to_vector(), c.x, c.theta, 1.0), c.x, DType::F64), 1e-13));
  }
}

// Token 0 is not turned: its angles are all 0.
TEST(RopeTest, FirstTokenIsUnchanged) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({2, 4, 3, 8}, DType::F64, kCPU, gen);
  const std::vector<double> vx = x.to_vector(), vy = rope(x).to_vector();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t k = 0; k < 3 * 8; ++k) {
      const size_t at = static_cast<size_t>(b * 4 * 3 * 8 + k);
      EXPECT_EQ(vy[at], vx[at]);
    }
}

TEST(RopeTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({2, 9, 3, 16}, DType::F64, kCPU, gen);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    KernelModeGuard guard(mode);
    EXPECT_TRUE(all_equal(rope(x, 10000.0), rope_composite(x, 10000.0))) << kernel_mode_name(mode);
  }
}

TEST(RopeTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const RopeCase& c : {RopeCase{{2, 3, 2, 4}, 10000.0}, RopeCase{{1, 5, 1, 6}, 100.0}}) {
    SCOPED_TRACE(case_name(c));
    EXPECT_TRUE(gradcheck(rope_fn(c.theta), {random_tensor(c.x, DType::F64, kCPU, gen)}, gen));
  }
}

// The rotation is orthogonal: the gradient of Σ w·rope(x) is w turned by the opposite angles.
TEST(RopeTest, BackwardIsTheOppositeRotation) {
  Generator gen = test_generator();
  const Shape shape{2, 7, 3, 8};
  const Tensor x = random_tensor(shape, DType::F64, kCPU, gen).requires_grad_();
  const Tensor w = random_tensor(shape, DType::F64, kCPU, gen);
  sum_all(rope(x, 500.0) * w).backward();
  EXPECT_TRUE(
      all_close(x.grad(), Tensor::from_vector(rotated(w.to_vector(), shape, 500.0, -1.0), shape, DType::F64), 1e-13));
}

// The tables are made once per (T, HS, θ, dtype, device), so a captured step never makes them.
TEST(RopeTest, TablesAreMadeOnceAndKept) {
  const RopeTables first = rope_tables(11, 8, {.theta = 10000.0}, DType::F32, kCPU);
  const RopeTables again = rope_tables(11, 8, {.theta = 10000.0}, DType::F32, kCPU);
  EXPECT_EQ(first.cos.data_ptr(), again.cos.data_ptr());
  EXPECT_EQ(first.sin.data_ptr(), again.sin.data_ptr());
  EXPECT_EQ(first.cos.shape(), (Shape{11, 4}));
  EXPECT_NE(rope_tables(11, 8, {.theta = 500.0}, DType::F32, kCPU).cos.data_ptr(), first.cos.data_ptr());
  EXPECT_NE(rope_tables(11, 8, {.theta = 10000.0, .factor = 8}, DType::F32, kCPU).cos.data_ptr(),
            first.cos.data_ptr());
}

// Llama 3.1's scaling (θ 500000, factor 8, low 1, high 4, context 8192, HS 128): wavelengths
// 2π/f under 8192/4 = 2048 tokens keep their frequency, those over 8192 are slowed 8 times, and
// those between fall smoothly from one to the other.
TEST(RopeTest, Llama3ScalingSlowsLongWavelengthsOnly) {
  const RopeConfig llama31{.theta = 500000.0, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                           .original_max_position = 8192};
  const std::vector<double> plain = rope_frequencies(128, {.theta = 500000.0});
  const std::vector<double> scaled = rope_frequencies(128, llama31);
  ASSERT_EQ(scaled.size(), 64u);
  int kept = 0, slowed = 0, blended = 0;
  for (size_t i = 0; i < 64; ++i) {
    const double wavelength = 2 * M_PI / plain[i];
    EXPECT_DOUBLE_EQ(plain[i], std::pow(500000.0, -static_cast<double>(2 * i) / 128));
    if (wavelength < 2048) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i]);
      ++kept;
    } else if (wavelength > 8192) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8);
      ++slowed;
    } else {
      // (1 - s)·f/8 + s·f with s = (8192/λ - 1)/3: between f/8 and f.
      const double s = (8192 / wavelength - 1) / 3;
      EXPECT_NEAR(scaled[i], (1 - s) * plain[i] / 8 + s * plain[i], 1e-18);
      EXPECT_GT(scaled[i], plain[i] / 8);
      EXPECT_LT(scaled[i], plain[i]);
      ++blended;
    }
    if (i > 0) {
      EXPECT_LT(scaled[i], scaled[i - 1]);  // still falling with i
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(slowed, 0);
  EXPECT_GT(blended, 0);
  EXPECT_FT_ERROR(rope(Tensor::full({1, 2, 1, 4}, 0.5), RopeConfig{.factor = 0.5}), "factor >= 1");
}

TEST(RopeTest, Contracts) {
  EXPECT_FT_ERROR(rope(Tensor::full({2, 3, 4, 5}, 0.5)), "HS even");  // an odd head size has no halves
  EXPECT_FT_ERROR(rope(Tensor::full({3, 4, 8}, 0.5)), "[B, T, NH, HS]");  // no head dim
  EXPECT_FT_ERROR(rope(Tensor::full({1, 2, 1, 4}, 1.0, DType::I32)), "f32, f64 or bf16");
  EXPECT_FT_ERROR(rope(Tensor::full({1, 2, 1, 4}, 0.5), 0.0), "θ must be positive");
  EXPECT_FT_ERROR(rope(Tensor::full({1, 2, 1, 4}, 0.5), std::nan("")), "θ must be positive");
  EXPECT_FT_ERROR(rope(Tensor()), "rope");
}

// ---- every device and kernel mode against the CPU f64 reference

class RopeDeviceTest : public DeviceModeTest {};

TEST_P(RopeDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const RopeCase& c : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c));
      EXPECT_TRUE(matches_f64_reference(rope_fn(c.theta), {random_tensor(c.x, DType::F64, kCPU, gen)}, device(), dtype,
                                        gen, forward_tolerance(dtype), grad_tolerance(dtype)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, RopeDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// ---- the fused CUDA path against its twin

TEST(RopeFusedVsTwinTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const RopeCase& c : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c));
      EXPECT_TRUE(
          fused_matches_twin(rope_fn(c.theta), {random_tensor(c.x, DType::F64, kCPU, gen)}, dtype, gen,
                             grad_tolerance(dtype)));
    }
  }
}

// Which path ran shows in the graph: one node fused, the twin's primitives otherwise.
TEST(RopeFusedVsTwinTest, FusedModeRecordsFewerNodesOnCudaOnly) {
  Generator gen = test_generator();
  expect_fewer_nodes_fused_on_cuda_only([](const std::vector<Tensor>& in) { return rope(in[0]); },
                                        {random_tensor({2, 5, 3, 16}, DType::F64, kCPU, gen)});
}

}  // namespace
}  // namespace ft
