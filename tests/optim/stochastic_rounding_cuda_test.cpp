// Stochastic rounding of the bf16 working copy in the fused AdamW (multi_tensor::adamw with
// stochastic_rounding). After a step, every bf16 value must be one of the two bf16 neighbours
// of its f32 master (truncated magnitude, or one step up); the rounding must be unbiased: the
// mean rounding error, in units of the gap, is about zero over many elements, and the share
// rounded up tracks where the master sits inside its gap; it must not be round-to-nearest; and
// another step number draws fresh bits. The masters are the same with and without it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lib/ops/elementwise/elementwise.h"
#include "lib/runtime.h"
#include "optim/multi_tensor.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Stepped {
  std::vector<double> master, working;
};

/// One fused AdamW step, as step number `applied`, over a bf16 parameter of n elements (f32
/// master, random gradient), with or without stochastic rounding; returns the master and the
/// bf16 copy.
Stepped step_bf16(int64_t n, bool stochastic, double lr, double applied, uint64_t seed) {
  Generator gen = test_generator(seed);
  auto values = [&](double scale) {
    return affine(Tensor::rand({n}, gen, DType::F32, kCUDA), 2.0 * scale, -scale);
  };
  multi_tensor::ParamSlots slots;
  slots.master = values(1.0);
  slots.param = cast(slots.master, DType::BF16);
  slots.grad = values(1.0);  // gradients are f32 (GradBuffer views)
  slots.first = Tensor::zeros({n}, DType::F32, kCUDA);
  slots.second = Tensor::zeros({n}, DType::F32, kCUDA);
  auto scalar = [](double v) { return Tensor::full({1}, v, DType::F32, kCUDA); };
  const StepState state{.lr = scalar(lr), .applied = scalar(applied), .skipped = scalar(0), .grad_norm = {},
                        .keep = scalar(1), .clip = scalar(1)};
  const multi_tensor::AdamWConfig config{0.9, 0.999, 1e-8, 0.0, stochastic, 1234};
  multi_tensor::adamw({slots}, config, state);
  return {slots.master.to_vector(), slots.param.to_vector()};
}

class StochasticRoundingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "the fused optimizer runs on CUDA only";
  }
};

TEST_F(StochasticRoundingTest, RoundsToANeighbourWithoutBias) {
  const int64_t n = 1 << 20;
  const Stepped sr = step_bf16(n, true, 1e-3, 1, 1);
  const Stepped rn = step_bf16(n, false, 1e-3, 1, 1);
  double error_in_gaps = 0.0, up_minus_expected = 0.0;
  int64_t differs_from_nearest = 0, on_grid = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float master = static_cast<float>(sr.master[i]);
    ASSERT_EQ(master, static_cast<float>(rn.master[i])) << "the master update must not depend on the rounding";
    const uint32_t low_bits = bits_of(master) & 0xFFFF0000u;
    const float low = from_bits(low_bits), high = from_bits(low_bits + 0x10000u);  // magnitude down / up
    const float working = static_cast<float>(sr.working[i]);
    ASSERT_TRUE(working == low || working == high)
        << "element " << i << ": bf16 " << working << " is not a neighbour of master " << master;
    if (master == low) {
      ++on_grid;
      ASSERT_EQ(working, low) << "a master that bf16 holds exactly must be kept";
      continue;
    }
    const double gap = static_cast<double>(high) - low;                 // signed: magnitude up
    const double position = (static_cast<double>(master) - low) / gap;  // in (0, 1)
    error_in_gaps += (static_cast<double>(working) - master) / std::fabs(gap);
    up_minus_expected += (working == high ? 1.0 : 0.0) - position;
    if (working != static_cast<float>(rn.working[i])) ++differs_from_nearest;
  }
  const double counted = static_cast<double>(n - on_grid);
  // Each term is bounded by 1 in size, so the means have a standard deviation of at most
  // 1 / sqrt(counted) ~ 0.001: 0.01 is ten of them. A rounding that always truncated would
  // give about -0.5 for the second figure's magnitude; round-to-nearest would be unbiased
  // too, which the third check rules out: it rounds the wrong way for about a quarter.
  EXPECT_LT(std::fabs(error_in_gaps / counted), 0.01);
  EXPECT_LT(std::fabs(up_minus_expected / counted), 0.01);
  EXPECT_GT(static_cast<double>(differs_from_nearest) / counted, 0.15);
}

TEST_F(StochasticRoundingTest, FreshBitsEachStepAndRepeatableRuns) {
  // lr = 0 leaves the masters where they are, so only the random bits can move the copy.
  const int64_t n = 1 << 16;
  const Stepped first = step_bf16(n, true, 0.0, 1, 2), again = step_bf16(n, true, 0.0, 1, 2);
  const Stepped second = step_bf16(n, true, 0.0, 2, 2);
  EXPECT_EQ(first.working, again.working) << "the same seed and step must give the same bits";
  ASSERT_EQ(first.master, second.master);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += first.working[i] != second.working[i];
  // Independent draws at masters spread evenly inside their gaps differ for 2·E[p(1 − p)] = 1/3
  // of the elements; the same bits would differ for none.
  EXPECT_GT(static_cast<double>(differ) / n, 0.25);
  EXPECT_LT(static_cast<double>(differ) / n, 0.42);
}

}  // namespace
}  // namespace ft
