// Reductions over the last axis (sum, mean, max, with and without keepdim), sum_all, and
// sum_to (the gradient of broadcasting): CPU f64 values against loops written here, gradient
// checks in f64, and every device × dtype against the CPU f64 reference. On CUDA,
// partial_row_sums (per-block partials into a gradient) against f64 sums, overwritten and added
// into an f32 view, for row counts around its warps' strides.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/ops/reduce/reduce_cuda.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

struct ReduceCase {
  std::string name;
  ReduceOp op;
  bool keepdim;
};
void PrintTo(const ReduceCase& c, std::ostream* out) { *out << c.name; }

std::vector<ReduceCase> reduce_cases() {
  return {{"sum", ReduceOp::Sum, false},   {"sum_keepdim", ReduceOp::Sum, true}, {"mean", ReduceOp::Mean, false},
          {"mean_keepdim", ReduceOp::Mean, true}, {"max", ReduceOp::Max, false},  {"max_keepdim", ReduceOp::Max, true}};
}

Tensor run(const ReduceCase& c, const Tensor& x) {
  switch (c.op) {
    case ReduceOp::Sum: return sum(x, c.keepdim);
    case ReduceOp::Mean: return mean(x, c.keepdim);
    default: return max(x, c.keepdim);
  }
}

Shape reduced_shape(const Shape& s, bool keepdim) {
  Shape out(s.begin(), s.end() - 1);
  if (keepdim) out.push_back(1);
  return out;
}

/// The reduction of each row of the last axis, in doubles.
std::vector<double> reference_rows(ReduceOp op, const std::vector<double>& v, int64_t cols) {
  std::vector<double> out;
  for (size_t r = 0; r * static_cast<size_t>(cols) < v.size(); ++r) {
    double acc = op == ReduceOp::Max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double x = v[r * static_cast<size_t>(cols) + static_cast<size_t>(c)];
      acc = op == ReduceOp::Max ? std::max(acc, x) : acc + x;
    }
    out.push_back(op == ReduceOp::Mean ? acc / static_cast<double>(cols) : acc);
  }
  return out;
}

// Rows of 1, 3, 33, 257 and 1000 columns (the last past one block of 256 threads), row counts
// that are not multiples of anything, and dims of size 1.
const std::vector<Shape> kDeviceShapes = {{1}, {3}, {257}, {1, 1}, {33, 1}, {3, 33}, {129, 257}, {2, 3, 129}, {5, 1000}};

class ReduceTest : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceTest, CpuF64MatchesLoops) {
  const ReduceCase& c = GetParam();
  Generator gen = test_generator();
  for (const Shape& shape : kDeviceShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor x = random_tensor(shape, DType::F64, kCPU, gen);
    const Tensor y = run(c, x);
    const Shape expected_shape = reduced_shape(shape, c.keepdim);
    ASSERT_EQ(y.shape(), expected_shape);
    const std::vector<double> expected = reference_rows(c.op, x.to_vector(), shape.back());
    EXPECT_TRUE(all_close(y, Tensor::from_vector(expected, expected_shape, DType::F64), 1e-14));
  }
}

TEST_P(ReduceTest, GradCheckF64) {
  const ReduceCase& c = GetParam();
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{4}, Shape{3, 7}, Shape{2, 3, 5}, Shape{3, 1}}) {
    SCOPED_TRACE(shape_str(shape));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return run(c, in[0]); },
                          {random_tensor(shape, DType::F64, kCPU, gen)}, gen));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceTest, ::testing::ValuesIn(reduce_cases()),
                         [](const auto& info) { return info.param.name; });

class ReduceDeviceTest : public ::testing::TestWithParam<std::tuple<ReduceCase, DeviceDType>> {};

TEST_P(ReduceDeviceTest, MatchesF64Reference) {
  const auto& [c, p] = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const Shape& shape : kDeviceShapes) {
    SCOPED_TRACE(shape_str(shape));
    EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return run(c, in[0]); },
                                      {random_tensor(shape, DType::F64, kCPU, gen)}, p.device, p.dtype, gen,
                                      forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceDeviceTest,
                         ::testing::Combine(::testing::ValuesIn(reduce_cases()), ::testing::ValuesIn(device_dtypes())),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + device_dtype_name(std::get<1>(info.param));
                         });

// The contract: max's gradient goes to every element equal to the maximum.
TEST(MaxTest, GradientReachesEveryTiedMaximum) {
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    SCOPED_TRACE(device.str());
    Tensor x = Tensor::from_vector({1, 3, 3, 2, 5, 0, 5, 5}, {2, 4}, DType::F32, device).requires_grad_();
    const Tensor m = max(x, true);
    EXPECT_TRUE(all_equal(m, Tensor::from_vector({3, 5}, {2, 1})));
    m.backward(Tensor::from_vector({2, -1}, {2, 1}, DType::F32, device));
    EXPECT_TRUE(all_equal(x.grad(), Tensor::from_vector({0, 2, 2, 0, -1, 0, -1, -1}, {2, 4})));
  }
}

// The kernels and the CPU loop both let NaN win, so a poisoned row stays visible.
TEST(MaxTest, NaNPropagatesOnEveryDevice) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = Tensor::from_vector({1, nan, 2, 4, 3, 0}, {2, 3});
  const std::vector<double> cpu = max(x).to_vector();
  EXPECT_TRUE(std::isnan(cpu[0]));
  EXPECT_EQ(cpu[1], 4.0);
  if (!cuda_available()) return;
  const std::vector<double> gpu = max(x.to(kCUDA)).to_vector();
  EXPECT_TRUE(std::isnan(gpu[0]));
  EXPECT_EQ(gpu[1], 4.0);
}

TEST(ReduceShapesTest, KeepdimAndDroppedShapes) {
  const Tensor x = Tensor::zeros({2, 3, 5});
  EXPECT_EQ(sum(x).shape(), (Shape{2, 3}));
  EXPECT_EQ(sum(x, true).shape(), (Shape{2, 3, 1}));
  const Tensor v = Tensor::zeros({5});
  EXPECT_EQ(mean(v).shape(), Shape{});
  EXPECT_EQ(mean(v, true).shape(), Shape{1});
}

TEST(SumAllTest, IsAScalarHoldingTheTotal) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1}, Shape{3, 33}, Shape{2, 3, 129}}) {
    const Tensor x = random_tensor(shape, DType::F64, kCPU, gen);
    const Tensor s = sum_all(x);
    EXPECT_EQ(s.shape(), Shape{});
    double total = 0.0;
    for (double v : x.to_vector()) total += v;
    EXPECT_NEAR(s.item(), total, 1e-12 * static_cast<double>(x.numel()));
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return sum_all(in[0]); },
                          {random_tensor({3, 4}, DType::F64, kCPU, gen)}, gen));
  }
}

// ---- sum_to

struct SumToCase {
  Shape from, to;
};

std::vector<SumToCase> sum_to_cases() {
  return {{{33, 129}, {129}},      {{33, 129}, {33, 1}},  {{2, 3, 5}, {3, 1}},  {{2, 3, 5}, {1, 3, 1}},
          {{2, 3, 5}, {2, 1, 5}},  {{4, 1, 5}, {5}},      {{2, 3, 5}, {1}},     {{6, 1, 1, 7}, {1, 7}},
          {{3, 257}, {3, 257}},    {{129, 3}, {1, 3}},    {{1, 33}, {33}}};
}

/// sum_to in doubles: every element of `from` adds into the target element it broadcasts from.
std::vector<double> reference_sum_to(const std::vector<double>& v, const Shape& from, const Shape& to) {
  std::vector<double> out(static_cast<size_t>(shape_numel(to)), 0.0);
  for (int64_t i = 0; i < shape_numel(from); ++i) {
    int64_t rest = i, index = 0, stride = 1;
    for (int64_t d = static_cast<int64_t>(from.size()) - 1, k = static_cast<int64_t>(to.size()) - 1; d >= 0; --d, --k) {
      const int64_t coord = rest % from[static_cast<size_t>(d)];
      rest /= from[static_cast<size_t>(d)];
      if (k < 0) continue;
      const int64_t size = to[static_cast<size_t>(k)];
      if (size != 1) index += coord * stride;
      stride *= size;
    }
    out[static_cast<size_t>(index)] += v[static_cast<size_t>(i)];
  }
  return out;
}

TEST(SumToTest, CpuF64MatchesLoops) {
  Generator gen = test_generator();
  for (const SumToCase& c : sum_to_cases()) {
    SCOPED_TRACE(shape_str(c.from) + " to " + shape_str(c.to));
    const Tensor x = random_tensor(c.from, DType::F64, kCPU, gen);
    const Tensor y = sum_to(x, c.to);
    ASSERT_EQ(y.shape(), c.to);
    EXPECT_TRUE(all_close(y, Tensor::from_vector(reference_sum_to(x.to_vector(), c.from, c.to), c.to, DType::F64),
                          1e-13));
  }
}

TEST(SumToTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const SumToCase& c : {SumToCase{{3, 5}, {5}}, SumToCase{{3, 5}, {3, 1}}, SumToCase{{2, 3, 4}, {1, 3, 1}},
                             SumToCase{{2, 3, 4}, {2, 1, 4}}, SumToCase{{2, 3}, {1}}}) {
    SCOPED_TRACE(shape_str(c.from) + " to " + shape_str(c.to));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return sum_to(in[0], c.to); },
                          {random_tensor(c.from, DType::F64, kCPU, gen)}, gen));
  }
}

class SumToDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(SumToDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const SumToCase& c : sum_to_cases()) {
    SCOPED_TRACE(shape_str(c.from) + " to " + shape_str(c.to));
    EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return sum_to(in[0], c.to); },
                                      {random_tensor(c.from, DType::F64, kCPU, gen)}, p.device, p.dtype, gen,
                                      forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, SumToDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

TEST(PartialRowSumsTest, AddsTheRowsInF32) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{128, 2304}, {1, 5}, {129, 33}, {300, 64}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const Tensor partials = random_tensor({rows, cols}, DType::F32, kCUDA, gen);
    const std::vector<double> values = partials.to_vector();
    std::vector<double> want(static_cast<size_t>(cols), 0.0), magnitude(static_cast<size_t>(cols), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        want[static_cast<size_t>(c)] += values[static_cast<size_t>(r * cols + c)];
        magnitude[static_cast<size_t>(c)] += std::abs(values[static_cast<size_t>(r * cols + c)]);
      }
    const Tensor out = Tensor::empty({cols}, DType::F32, kCUDA);
    if constexpr (kCudaBuild) cuda::partial_row_sums(partials, GradOutput(out));
    const Tensor base = random_tensor({cols}, DType::F32, kCUDA, gen), view = fresh_copy(base, DType::F32, kCUDA);
    if constexpr (kCudaBuild) cuda::partial_row_sums(partials, GradOutput(view, true, true));
    const std::vector<double> got = out.to_vector(), added = view.to_vector(), before = base.to_vector();
    for (size_t c = 0; c < got.size(); ++c) {
      const double allowed = static_cast<double>(rows + 1) * std::ldexp(1.0, -24) * (magnitude[c] + std::abs(before[c]));
      ASSERT_NEAR(got[c], want[c], allowed) << "column " << c;
      ASSERT_NEAR(added[c], want[c] + before[c], allowed) << "added, column " << c;
    }
  }
}

}  // namespace
}  // namespace ft
