// Elementwise primitives: unary math, the scalar forms, binary arithmetic with broadcasting,
// (expand, comparisons, where and cast: elementwise_select_test.cpp). Each op is checked three ways: its CPU f64 values
// against a formula written out here, a central-difference gradient check in f64, and every
// device × dtype against the CPU f64 reference (forward and backward).
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "tests/lib/ops/broadcast_reference.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

// ---- the broadcast plan: merged dims index exactly as the unmerged shapes do

TEST(BroadcastPlanTest, MergedDimsGiveTheSameIndicesAsTheShapes) {
  std::mt19937_64 rng(test_seed());
  for (int trial = 0; trial < 300; ++trial) {
    Shape out(static_cast<size_t>(rng() % 7));  // rank 0 to 6
    for (int64_t& d : out) d = 1 + static_cast<int64_t>(rng() % 5);
    std::vector<Shape> shapes;
    for (size_t k = 0, operands = 1 + rng() % 3; k < operands; ++k) {
      Shape s(out.begin() + static_cast<std::ptrdiff_t>(rng() % (out.size() + 1)), out.end());  // leading dims dropped
      for (int64_t& d : s)
        if (rng() % 3 == 0) d = 1;  // broadcast along this dim
      shapes.push_back(s);
    }
    std::vector<const Shape*> operands;
    for (const Shape& s : shapes) operands.push_back(&s);
    const BroadcastPlan plan = broadcast_plan("test", out, operands);
    ASSERT_LE(plan.ndim, static_cast<int>(out.size()));
    for (size_t k = 0; k < shapes.size(); ++k)
      for (int64_t i = 0; i < shape_numel(out); ++i)
        ASSERT_EQ(plan.operand_index(static_cast<int>(k), i), operand_index(i, out, shapes[k]))
            << "output " << shape_str(out) << ", operand " << shape_str(shapes[k]) << ", element " << i;
  }
}

TEST(BroadcastPlanTest, MergesWhatEveryOperandWalksAlike) {
  const auto dims = [](const Shape& out, std::vector<Shape> shapes) {
    std::vector<const Shape*> operands;
    for (const Shape& s : shapes) operands.push_back(&s);
    return broadcast_plan("test", out, operands).ndim;
  };
  EXPECT_EQ(dims({16, 12, 64, 64}, {{16, 12, 64, 64}, {16, 12, 64, 1}}), 2);  // x - max(x, keepdim)
  EXPECT_EQ(dims({4096, 768}, {{4096, 768}, {768}}), 2);                      // + bias
  EXPECT_EQ(dims({2, 3, 5}, {{2, 3, 5}, {2, 3, 5}}), 1);                      // same shapes: flat
  EXPECT_EQ(dims({64, 1, 64}, {{64, 1, 64}, {1}}), 1);                        // a size-1 dim and a scalar
  EXPECT_EQ(dims({8, 4, 6}, {{8, 1, 6}, {8, 4, 6}}), 3);                      // a broadcast in the middle
}

// The CUDA kernels' 32-bit index math: FastDivmod's quotients and BroadcastIndex32's operand
// indices against plain division and the plan, on the host (the same code runs on the device).
TEST(FastDivmodTest, MatchesDivisionBelow2To31) {
  std::mt19937_64 rng(test_seed());
  std::vector<uint32_t> divisors = {1, 2, 3, 7, 64, 1000, 1023, 1024, 50304, 65537, 2147483647u};
  for (int k = 0; k < 200; ++k) divisors.push_back(1 + static_cast<uint32_t>(rng() % 2147483647u));
  for (uint32_t d : divisors) {
    const FastDivmod f(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, 2147483647u, 2147483647u - 1};
    for (int k = 0; k < 200; ++k) ns.push_back(static_cast<uint32_t>(rng() % 2147483648u));
    for (uint32_t n : ns) {
      if (n >= 2147483648u) continue;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
}

TEST(BroadcastIndex32Test, GivesThePlansIndices) {
  std::mt19937_64 rng(test_seed(1));
  for (int trial = 0; trial < 300; ++trial) {
    Shape out(1 + rng() % 5);
    for (int64_t& d : out) d = 1 + static_cast<int64_t>(rng() % 9);
    Shape a = out, b(out.begin() + static_cast<std::ptrdiff_t>(rng() % out.size()), out.end());
    for (int64_t& d : a)
      if (rng() % 3 == 0) d = 1;
    for (int64_t& d : b)
      if (rng() % 2 == 0) d = 1;
    const BroadcastPlan plan = broadcast_plan("test", out, {&a, &b});
    const BroadcastIndex32<2> index(plan);
    for (int64_t i = 0; i < shape_numel(out); ++i) {
      uint32_t got[2];
      index(static_cast<uint32_t>(i), got);
      ASSERT_EQ(got[0], plan.operand_index(0, i)) << shape_str(out) << " " << shape_str(a) << " element " << i;
      ASSERT_EQ(got[1], plan.operand_index(1, i)) << shape_str(out) << " " << shape_str(b) << " element " << i;
    }
  }
}

// Views that start off a 16-byte boundary (narrow along dim 0 shares storage) cannot take the
// contiguous kernels' vector accesses; single-element operands are broadcast inside them. Both
// must give the CPU's values.
TEST(ElementwiseViewsTest, UnalignedViewsAndSingleElementsMatchCpu) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    for (int64_t offset : {0, 1, 3}) {
      for (int64_t n : {1, 7, 1000, 4099}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " offset " + std::to_string(offset) + " n " + std::to_string(n));
        const Tensor a = narrow(random_tensor({n + 8}, dtype, kCUDA, gen), 0, offset, n);
        const Tensor b = narrow(positive_tensor({n + 8}, dtype, kCUDA, gen), 0, 8 - offset, n);
        const Tensor s = random_tensor({1}, dtype, kCUDA, gen);
        const Tensor ac = a.to(kCPU), bc = b.to(kCPU), sc = s.to(kCPU);
        EXPECT_TRUE(all_equal(add(a, b), add(ac, bc)));
        EXPECT_TRUE(all_equal(div(a, b), div(ac, bc)));
        EXPECT_TRUE(all_equal(mul(s, b), mul(sc, bc)));
        EXPECT_TRUE(all_equal(sub(a, s), sub(ac, sc)));
        EXPECT_TRUE(all_close(exp(a), exp(ac), forward_tolerance(dtype)));
        for (DType to : {DType::F32, DType::BF16, DType::F64})
          EXPECT_TRUE(all_equal(cast(a, to), cast(ac, to))) << "cast to " << dtype_name(to);
      }
    }
  }
}

// ---- unary ops and the scalar forms of the binary ops

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> formula;
  bool positive = false;  // the domain needs x > 0
  // tanh's gradient g · (1 − out²) comes from the saved output. In bf16, out is rounded by up
  // to 2^-9, which 1 − out² cannot absorb once |x| is large (|x| = 3: 1 − out² = 0.01 with an
  // error of 0.004). That is bf16's rounding, not a kernel error, so bf16 draws x in [-1, 1],
  // where 1 − out² >= 0.42; f32 and f64 still cover the tails.
  bool bf16_unit_range = false;
};
void PrintTo(const UnaryCase& c, std::ostream* out) { *out << c.name; }

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }},
      {"minus_operator", [](const Tensor& x) { return -x; }, [](double v) { return -v; }},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1.0 / std::sqrt(v); }, true},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, false, true},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0.0; }},
      {"pow_3", [](const Tensor& x) { return pow(x, 3.0); }, [](double v) { return v * v * v; }},
      {"pow_2_5", [](const Tensor& x) { return pow(x, 2.5); }, [](double v) { return std::pow(v, 2.5); }, true},
      {"pow_minus_1_5", [](const Tensor& x) { return pow(x, -1.5); }, [](double v) { return std::pow(v, -1.5); }, true},
      {"affine", [](const Tensor& x) { return affine(x, -1.75, 0.5); }, [](double v) { return -1.75 * v + 0.5; }},
      {"tensor_plus_scalar", [](const Tensor& x) { return x + 2.5; }, [](double v) { return v + 2.5; }},
      {"tensor_minus_scalar", [](const Tensor& x) { return x - 2.5; }, [](double v) { return v - 2.5; }},
      {"tensor_times_scalar", [](const Tensor& x) { return x * -3.0; }, [](double v) { return v * -3.0; }},
      {"tensor_over_scalar", [](const Tensor& x) { return x / 3.0; }, [](double v) { return v / 3.0; }},
      {"scalar_plus_tensor", [](const Tensor& x) { return 2.5 + x; }, [](double v) { return 2.5 + v; }},
      {"scalar_minus_tensor", [](const Tensor& x) { return 2.5 - x; }, [](double v) { return 2.5 - v; }},
      {"scalar_times_tensor", [](const Tensor& x) { return 0.5 * x; }, [](double v) { return 0.5 * v; }},
  };
}

Tensor unary_input(const UnaryCase& c, const Shape& shape, DType dtype, Generator& gen) {
  return c.positive ? positive_tensor(shape, dtype, kCPU, gen) : random_tensor(shape, dtype, kCPU, gen);
}

class UnaryTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryTest, CpuF64MatchesFormula) {
  const UnaryCase& c = GetParam();
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1}, Shape{3, 33}, Shape{2, 1, 129}}) {
    const Tensor x = unary_input(c, shape, DType::F64, gen);
    const Tensor y = c.op(x);
    ASSERT_EQ(y.shape(), shape);
    ASSERT_EQ(y.dtype(), DType::F64);
    std::vector<double> expected = x.to_vector();
    for (double& v : expected) v = c.formula(v);
    EXPECT_TRUE(all_close(y, Tensor::from_vector(expected, shape, DType::F64), 1e-14));
  }
}

TEST_P(UnaryTest, GradCheckF64) {
  const UnaryCase& c = GetParam();
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1}, Shape{3, 7}}) {
    const Tensor x = unary_input(c, shape, DType::F64, gen);
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x}, gen));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryTest, ::testing::ValuesIn(unary_cases()),
                         [](const auto& info) { return info.param.name; });

class UnaryDeviceTest : public ::testing::TestWithParam<std::tuple<UnaryCase, DeviceDType>> {};

TEST_P(UnaryDeviceTest, MatchesF64Reference) {
  const auto& [c, p] = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1}, Shape{3}, Shape{257}, Shape{33, 129}, Shape{2, 1, 33}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor x = c.bf16_unit_range && p.dtype == DType::BF16 ? uniform_tensor(shape, DType::F64, kCPU, gen, -1.0, 1.0)
                                                                 : unary_input(c, shape, DType::F64, gen);
    EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x}, p.device,
                                      p.dtype, gen, forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryDeviceTest,
                         ::testing::Combine(::testing::ValuesIn(unary_cases()), ::testing::ValuesIn(device_dtypes())),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + device_dtype_name(std::get<1>(info.param));
                         });

// ---- binary ops with broadcasting

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> formula;
  bool positive_b = false;  // a divisor, kept away from zero
};
void PrintTo(const BinaryCase& c, std::ostream* out) { *out << c.name; }

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }, true},
      {"plus_operator", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }},
      {"minus_operator", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }},
      {"times_operator", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }},
      {"over_operator", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; },
       true},
  };
}

// Same shapes, a bias [C] on either side of [N, C], a row statistic [N, 1] on either side, a
// one-element operand, both operands broadcasting at once, and sizes that are not multiples of
// 4, 32 or 128.
std::vector<ShapePair> device_shape_pairs() {
  return {{{33, 129}, {33, 129}}, {{33, 129}, {129}}, {{129}, {33, 129}}, {{33, 129}, {33, 1}},
          {{33, 1}, {33, 129}},   {{1}, {3, 257}},    {{2, 1, 33}, {3, 1}}, {{1, 1}, {1}},
          {{257}, {257}}};
}
std::vector<ShapePair> small_shape_pairs() {
  return {{{3, 5}, {3, 5}}, {{3, 5}, {5}}, {{5}, {3, 5}}, {{3, 5}, {3, 1}}, {{3, 1}, {3, 5}},
          {{1}, {2, 3}},    {{2, 1, 4}, {3, 1}}, {{1}, {1}}};
}

std::vector<Tensor> binary_inputs(const BinaryCase& c, const ShapePair& s, Generator& gen) {
  Tensor b = c.positive_b ? positive_tensor(s.b, DType::F64, kCPU, gen) : random_tensor(s.b, DType::F64, kCPU, gen);
  return {random_tensor(s.a, DType::F64, kCPU, gen), b};
}

class BinaryTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryTest, CpuF64MatchesFormula) {
  const BinaryCase& c = GetParam();
  Generator gen = test_generator();
  for (const ShapePair& s : device_shape_pairs()) {
    SCOPED_TRACE(shape_str(s.a) + " with " + shape_str(s.b));
    const std::vector<Tensor> in = binary_inputs(c, s, gen);
    const Tensor y = c.op(in[0], in[1]);
    const Shape out = broadcast_of(s.a, s.b);
    ASSERT_EQ(y.shape(), out);
    const std::vector<double> va = in[0].to_vector(), vb = in[1].to_vector();
    std::vector<double> expected(static_cast<size_t>(shape_numel(out)));
    for (int64_t i = 0; i < shape_numel(out); ++i)
      expected[static_cast<size_t>(i)] = c.formula(va[static_cast<size_t>(operand_index(i, out, s.a))],
                                                   vb[static_cast<size_t>(operand_index(i, out, s.b))]);
    EXPECT_TRUE(all_close(y, Tensor::from_vector(expected, out, DType::F64), 1e-15));
  }
}

TEST_P(BinaryTest, GradCheckF64) {
  const BinaryCase& c = GetParam();
  Generator gen = test_generator();
  for (const ShapePair& s : small_shape_pairs()) {
    SCOPED_TRACE(shape_str(s.a) + " with " + shape_str(s.b));
    EXPECT_TRUE(
        gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, binary_inputs(c, s, gen), gen));
  }
}

// Only one operand needs a gradient: the other's backward branch must not run or break.
TEST_P(BinaryTest, GradCheckOneOperandF64) {
  const BinaryCase& c = GetParam();
  Generator gen = test_generator();
  const std::vector<Tensor> in = binary_inputs(c, {{3, 5}, {5}}, gen);
  auto f = [&](const std::vector<Tensor>& x) { return c.op(x[0], x[1]); };
  EXPECT_TRUE(gradcheck(f, in, gen, {.wrt = {true, false}}));
  EXPECT_TRUE(gradcheck(f, in, gen, {.wrt = {false, true}}));
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryTest, ::testing::ValuesIn(binary_cases()),
                         [](const auto& info) { return info.param.name; });

class BinaryDeviceTest : public ::testing::TestWithParam<std::tuple<BinaryCase, DeviceDType>> {};

TEST_P(BinaryDeviceTest, MatchesF64Reference) {
  const auto& [c, p] = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const ShapePair& s : device_shape_pairs()) {
    SCOPED_TRACE(shape_str(s.a) + " with " + shape_str(s.b));
    EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); },
                                      binary_inputs(c, s, gen), p.device, p.dtype, gen, forward_tolerance(p.dtype),
                                      grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryDeviceTest,
                         ::testing::Combine(::testing::ValuesIn(binary_cases()), ::testing::ValuesIn(device_dtypes())),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + device_dtype_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ft
