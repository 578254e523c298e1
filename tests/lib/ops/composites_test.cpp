// The composite ops: gelu, layer_norm, dropout and cross_entropy. Each against a reference
// written out here in doubles, a gradient check in f64, and every device × dtype against the
// CPU f64 reference. Dropout's mask is checked bit for bit against the Philox contract and
// across devices.
#include <cmath>
#include <limits>
#include <vector>

#include "lib/ops/cross_entropy/cross_entropy.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/philox.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

class CompositeDeviceTest : public ::testing::TestWithParam<DeviceDType> {
 protected:
  void SetUp() override { FT_SKIP_UNLESS_AVAILABLE(GetParam().device); }
  ::testing::AssertionResult matches(const TensorFn& f, const std::vector<Tensor>& inputs, Generator& gen) {
    const DeviceDType p = GetParam();
    return matches_f64_reference(f, inputs, p.device, p.dtype, gen, forward_tolerance(p.dtype),
                                 grad_tolerance(p.dtype));
  }
};

// ---- gelu

double gelu_formula(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

TEST(GeluTest, CpuF64MatchesFormula) {
  Generator gen = test_generator();
  // Wide inputs reach both tails, where tanh saturates.
  const Tensor x = affine(random_tensor({33, 129}, DType::F64, kCPU, gen), 3.0, 0.0);
  std::vector<double> expected = x.to_vector();
  for (double& v : expected) v = gelu_formula(v);
  EXPECT_TRUE(all_close(gelu(x), Tensor::from_vector(expected, {33, 129}, DType::F64), 1e-14));
}

TEST(GeluTest, GradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return gelu(in[0]); },
                        {affine(random_tensor({4, 7}, DType::F64, kCPU, gen), 2.0, 0.0)}, gen));
}

using GeluDeviceTest = CompositeDeviceTest;
TEST_P(GeluDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1}, Shape{257}, Shape{33, 129}, Shape{2, 5, 64}}) {
    SCOPED_TRACE(shape_str(shape));
    EXPECT_TRUE(matches([](const std::vector<Tensor>& in) { return gelu(in[0]); },
                        {random_tensor(shape, DType::F64, kCPU, gen)}, gen));
  }
}
INSTANTIATE_TEST_SUITE_P(Devices, GeluDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// ---- layer_norm

/// Layer norm of each row of the last dim, in doubles: biased variance, eps inside the root.
std::vector<double> reference_layer_norm(const std::vector<double>& x, const std::vector<double>& w,
                                         const std::vector<double>& b, int64_t c, double eps) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r * static_cast<size_t>(c) < x.size(); ++r) {
    const double* row = x.data() + r * static_cast<size_t>(c);
    double mean = 0.0, var = 0.0;
    for (int64_t j = 0; j < c; ++j) mean += row[j];
    mean /= static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(c);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < c; ++j)
      out[r * static_cast<size_t>(c) + static_cast<size_t>(j)] =
          (row[j] - mean) * inv * w[static_cast<size_t>(j)] + b[static_cast<size_t>(j)];
  }
  return out;
}

TEST(LayerNormTest, CpuF64MatchesReference) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1, 3}, Shape{3, 129}, Shape{33, 257}, Shape{2, 5, 64}}) {
    for (double eps : {1e-5, 0.1}) {
      SCOPED_TRACE(shape_str(shape) + " eps " + std::to_string(eps));
      const int64_t c = shape.back();
      // A row offset and scale of their own, so centring and scaling both matter.
      const Tensor x = affine(random_tensor(shape, DType::F64, kCPU, gen), 2.5, 1.5);
      const Tensor w = random_tensor({c}, DType::F64, kCPU, gen), b = random_tensor({c}, DType::F64, kCPU, gen);
      const Tensor y = layer_norm(x, w, b, eps);
      ASSERT_EQ(y.shape(), shape);
      EXPECT_TRUE(all_close(
          y, Tensor::from_vector(reference_layer_norm(x.to_vector(), w.to_vector(), b.to_vector(), c, eps), shape,
                                 DType::F64),
          1e-12));
    }
  }
}

TEST(LayerNormTest, RowsHaveZeroMeanAndUnitVarianceBeforeAffine) {
  Generator gen = test_generator();
  const int64_t rows = 33, c = 129;
  const Tensor x = affine(random_tensor({rows, c}, DType::F64, kCPU, gen), 4.0, -3.0);
  const std::vector<double> y =
      layer_norm(x, Tensor::full({c}, 1.0, DType::F64), Tensor::zeros({c}, DType::F64), 1e-5).to_vector();
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t j = 0; j < c; ++j) mean += y[static_cast<size_t>(r * c + j)];
    mean /= static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) var += std::pow(y[static_cast<size_t>(r * c + j)] - mean, 2);
    var /= static_cast<double>(c);
    EXPECT_NEAR(mean, 0.0, 1e-12) << "row " << r;
    // var(x)/(var(x) + eps) with var(x) about 16: 1 - 6e-7.
    EXPECT_NEAR(var, 1.0, 1e-5) << "row " << r;
  }
}

// One column has zero variance: the row normalizes to 0 and the result is the bias.
TEST(LayerNormTest, SingleColumnGivesTheBias) {
  const Tensor x = Tensor::from_vector({3, -1, 7}, {3, 1}, DType::F64);
  const Tensor y = layer_norm(x, Tensor::full({1}, 2.0, DType::F64), Tensor::full({1}, 0.25, DType::F64));
  EXPECT_EQ(y.to_vector(), (std::vector<double>{0.25, 0.25, 0.25}));
}

TEST(LayerNormTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t c = shape.back();
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2]); },
                          {random_tensor(shape, DType::F64, kCPU, gen), random_tensor({c}, DType::F64, kCPU, gen),
                           random_tensor({c}, DType::F64, kCPU, gen)},
                          gen));
  }
}

// x's gradient is g·w/σ with the row mean and the x̂ direction projected out. With very few
// columns (C = 3 keeps one direction of three) it can be far smaller than g·w/σ, and the
// rounding of g·w then dominates the relative error: that is conditioning, not a kernel error,
// so the device shapes start at C = 8 (C = 1, where the gradient is exactly 0, is kept). The
// gains stay away from 0, where the fused backward cannot recover x̂ from its output.
using LayerNormDeviceTest = CompositeDeviceTest;
TEST_P(LayerNormDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1, 8}, Shape{3, 1}, Shape{33, 129}, Shape{2, 5, 64}, Shape{3, 1000}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t c = shape.back();
    EXPECT_TRUE(matches([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2]); },
                        {random_tensor(shape, DType::F64, kCPU, gen), gain_tensor({c}, DType::F64, kCPU, gen),
                         random_tensor({c}, DType::F64, kCPU, gen)},
                        gen));
  }
}
INSTANTIATE_TEST_SUITE_P(Devices, LayerNormDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// ---- dropout

TEST(DropoutTest, ZeroProbabilityReturnsTheInput) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({33, 65}, DType::F32, kCPU, gen);
  EXPECT_TRUE(all_equal(dropout(x, 0.0, 1, 0), x));
}

TEST(DropoutTest, ProbabilityOneGivesZerosAndZeroGradient) {
  Generator gen = test_generator();
  Tensor x = random_tensor({33, 65}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor y = dropout(x, 1.0, 1, 0);
  EXPECT_TRUE(all_equal(y, Tensor::zeros({33, 65}, DType::F64)));
  sum_all(y).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(all_equal(x.grad(), Tensor::zeros({33, 65}, DType::F64)));
}

// The header's contract: element i is kept when philox::dropout_uniform(seed, offset, i) >= p in f32,
// and kept values are scaled by 1 / (1 - p).
TEST(DropoutTest, MaskAndScaleFollowTheContract) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed(), offset = 4 * 17;
  for (double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE(p);
    const Tensor x = random_tensor({129, 257}, DType::F64, kCPU, gen);
    const std::vector<double> vx = x.to_vector(), vy = dropout(x, p, seed, offset).to_vector();
    int64_t kept = 0;
    for (size_t i = 0; i < vx.size(); ++i) {
      const bool keep = philox::dropout_uniform(seed, offset, i) >= static_cast<float>(p);
      if (keep) {
        ++kept;
        ASSERT_NEAR(vy[i], vx[i] / (1.0 - p), 1e-14 * std::abs(vx[i] / (1.0 - p))) << i;
      } else {
        ASSERT_EQ(vy[i], 0.0) << i;
      }
    }
    // 33153 draws: the standard error of the kept fraction is under 0.003.
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(vx.size()), 1.0 - p, 0.015);
  }
}

TEST(DropoutTest, OffsetAndSeedChangeTheMask) {
  const Tensor x = Tensor::full({4096}, 1.0);
  const std::vector<double> a = dropout(x, 0.5, 3, 0).to_vector(), b = dropout(x, 0.5, 3, 4096).to_vector(),
                            c = dropout(x, 0.5, 4, 0).to_vector();
  int64_t same_ab = 0, same_ac = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
  }
  // Independent masks agree on about half the elements.
  EXPECT_NEAR(static_cast<double>(same_ab) / 4096.0, 0.5, 0.05);
  EXPECT_NEAR(static_cast<double>(same_ac) / 4096.0, 0.5, 0.05);
  EXPECT_EQ(dropout(x, 0.5, 3, 0).to_vector(), a);  // and the same key gives the same mask
}

TEST(DropoutTest, GradCheckF64) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  for (double p : {0.3, 0.75}) {
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return dropout(in[0], p, seed, 8); },
                          {random_tensor({5, 7}, DType::F64, kCPU, gen)}, gen));
  }
}

TEST(DropoutTest, CudaMaskIsBitIdenticalToCpu) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t n : {1, 33, 257, 100003}) {
      for (uint64_t offset : {0ull, 12ull, (1ull << 33) + 4}) {
        const Tensor x = random_tensor({n}, dtype, kCPU, gen);
        const std::vector<double> cpu = dropout(x, 0.3, seed, offset).to_vector();
        const std::vector<double> gpu = dropout(x.to(kCUDA), 0.3, seed, offset).to_vector();
        for (size_t i = 0; i < cpu.size(); ++i) {
          ASSERT_EQ(gpu[i] == 0.0, cpu[i] == 0.0) << dtype_name(dtype) << " n " << n << " element " << i;
          ASSERT_NEAR(gpu[i], cpu[i], 1e-2 * std::abs(cpu[i]));
        }
      }
    }
  }
}

using DropoutDeviceTest = CompositeDeviceTest;
TEST_P(DropoutDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  for (const Shape& shape : {Shape{1}, Shape{33, 129}, Shape{2, 5, 64}}) {
    SCOPED_TRACE(shape_str(shape));
    EXPECT_TRUE(matches([&](const std::vector<Tensor>& in) { return dropout(in[0], 0.2, seed, 36); },
                        {random_tensor(shape, DType::F64, kCPU, gen)}, gen));
  }
}
INSTANTIATE_TEST_SUITE_P(Devices, DropoutDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// ---- cross_entropy

/// Cross-entropy in doubles: logsumexp(row) - row[target], ignored rows left out; mean over
/// the counted rows (NaN when none) or their sum.
double reference_cross_entropy(const std::vector<double>& logits, const std::vector<double>& targets, int64_t vocab,
                               int64_t ignore_index, Reduction reduction) {
  double total = 0.0;
  int64_t counted = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    const int64_t t = static_cast<int64_t>(targets[r]);
    if (t == ignore_index) continue;
    const double* row = logits.data() + r * static_cast<size_t>(vocab);
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < vocab; ++j) m = std::max(m, row[j]);
    double s = 0.0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(row[j] - m);
    total += m + std::log(s) - row[t];
    ++counted;
  }
  if (reduction == Reduction::Sum) return total;
  return counted ? total / static_cast<double>(counted) : std::numeric_limits<double>::quiet_NaN();
}

/// Targets in [0, vocab) with every third row set to ignore_index.
Tensor targets_with_ignored(int64_t n, int64_t vocab, int64_t ignore_index, DType dtype, Generator& gen) {
  std::vector<double> t = random_ids({n}, vocab, DType::I64, kCPU, gen).to_vector();
  for (size_t i = 1; i < t.size(); i += 3) t[i] = static_cast<double>(ignore_index);
  return Tensor::from_vector(t, {n}, dtype);
}

TEST(CrossEntropyTest, CpuF64MatchesReference) {
  Generator gen = test_generator();
  for (auto [n, vocab] : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {7, 5}, {33, 257}, {4, 1}}) {
    for (DType id_dtype : {DType::I64, DType::I32}) {
      for (int64_t ignore : {int64_t{-100}, int64_t{0}}) {  // ignore_index may also be a valid class
        for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
          SCOPED_TRACE(testing::Message() << "n " << n << " V " << vocab << " " << dtype_name(id_dtype) << " ignore "
                                          << ignore << (reduction == Reduction::Sum ? " sum" : " mean"));
          const Tensor logits = affine(random_tensor({n, vocab}, DType::F64, kCPU, gen), 3.0, 0.0);
          const Tensor targets = targets_with_ignored(n, vocab, ignore, id_dtype, gen);
          const Tensor loss = cross_entropy(logits, targets, {.ignore_index = ignore, .reduction = reduction});
          EXPECT_EQ(loss.shape(), Shape{});
          EXPECT_EQ(loss.dtype(), DType::F64);
          const double expected =
              reference_cross_entropy(logits.to_vector(), targets.to_vector(), vocab, ignore, reduction);
          if (std::isnan(expected))  // every row ignored (V = 1 with ignore_index 0): mean is NaN
            EXPECT_TRUE(std::isnan(loss.item()));
          else
            EXPECT_NEAR(loss.item(), expected, 1e-12 * std::max(1.0, std::abs(expected)));
        }
      }
    }
  }
}

TEST(CrossEntropyTest, LargeLogitsStayFinite) {
  Generator gen = test_generator();
  const Tensor logits = affine(random_tensor({5, 11}, DType::F64, kCPU, gen), 1.0, 1000.0);
  const Tensor targets = random_ids({5}, 11, DType::I64, kCPU, gen);
  const double loss = cross_entropy(logits, targets).item();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, reference_cross_entropy(logits.to_vector(), targets.to_vector(), 11, -100, Reduction::Mean), 1e-10);
  const Tensor f32 = cross_entropy(logits.to(DType::F32), targets);
  EXPECT_TRUE(std::isfinite(f32.item()));
}

TEST(CrossEntropyTest, AllRowsIgnoredMeanIsNaN) {
  const Tensor logits = Tensor::zeros({3, 4}, DType::F64);
  const Tensor targets = Tensor::full({3}, -100.0, DType::I64);
  EXPECT_TRUE(std::isnan(cross_entropy(logits, targets).item()));
  EXPECT_EQ(cross_entropy(logits, targets, {.reduction = Reduction::Sum}).item(), 0.0);
}

TEST(CrossEntropyTest, BF16LogitsGiveAnF32Loss) {
  const Tensor loss = cross_entropy(Tensor::zeros({2, 4}, DType::BF16), Tensor::from_vector({1, 3}, {2}, DType::I64));
  EXPECT_EQ(loss.dtype(), DType::F32);
  EXPECT_NEAR(loss.item(), std::log(4.0), 1e-6);  // uniform logits: log V
}

TEST(CrossEntropyTest, GradCheckF64) {
  Generator gen = test_generator();
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
    for (int64_t ignore : {int64_t{-100}, int64_t{2}}) {
      const Tensor targets = targets_with_ignored(6, 5, ignore, DType::I64, gen);
      const CrossEntropyOptions options{.ignore_index = ignore, .reduction = reduction};
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], options); },
                            {affine(random_tensor({6, 5}, DType::F64, kCPU, gen), 2.0, 0.0), targets}, gen));
    }
  }
}

using CrossEntropyDeviceTest = CompositeDeviceTest;
TEST_P(CrossEntropyDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (auto [n, vocab] : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {33, 257}, {129, 1000}, {5, 1}}) {
    for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " V " << vocab << (reduction == Reduction::Sum ? " sum" : " mean"));
      const Tensor targets = targets_with_ignored(n, vocab, -100, DType::I64, gen);
      const CrossEntropyOptions options{.reduction = reduction};
      EXPECT_TRUE(matches([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], options); },
                          {random_tensor({n, vocab}, DType::F64, kCPU, gen), targets}, gen));
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Devices, CrossEntropyDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

}  // namespace
}  // namespace ft
