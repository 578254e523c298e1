// Elementwise primitives: unary math, the scalar forms, binary arithmetic with broadcasting,
// expand, comparisons, where and cast. Each op is checked three ways: its CPU f64 values
// against a formula written out here, a central-difference gradient check in f64, and every
// device × dtype against the CPU f64 reference (forward and backward).
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lib/ops/elementwise.h"
#include "lib/ops/shape_ops.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

// ---- numpy broadcasting, written out independently of the library's BroadcastPlan

Shape broadcast_of(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// Flat index into an operand of shape s for output element i of shape out.
int64_t operand_index(int64_t i, const Shape& out, const Shape& s) {
  int64_t index = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1, k = static_cast<int64_t>(s.size()) - 1; d >= 0; --d, --k) {
    const int64_t coord = i % out[static_cast<size_t>(d)];
    i /= out[static_cast<size_t>(d)];
    if (k < 0) continue;
    const int64_t size = s[static_cast<size_t>(k)];
    if (size != 1) index += coord * stride;
    stride *= size;
  }
  return index;
}

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

struct ShapePair {
  Shape a, b;
};

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

// ---- expand

std::vector<ShapePair> expand_cases() {  // a: input, b: target
  return {{{3, 1}, {3, 5}}, {{5}, {2, 3, 5}}, {{1}, {4}}, {{2, 1, 33}, {2, 129, 33}}, {{1, 1}, {1, 1}}};
}

TEST(ExpandTest, CpuF64MatchesFormulaAndGradCheck) {
  Generator gen = test_generator();
  for (const ShapePair& s : expand_cases()) {
    SCOPED_TRACE(shape_str(s.a) + " to " + shape_str(s.b));
    const Tensor x = random_tensor(s.a, DType::F64, kCPU, gen);
    const Tensor y = expand(x, s.b);
    ASSERT_EQ(y.shape(), s.b);
    const std::vector<double> vx = x.to_vector();
    std::vector<double> expected(static_cast<size_t>(shape_numel(s.b)));
    for (int64_t i = 0; i < shape_numel(s.b); ++i)
      expected[static_cast<size_t>(i)] = vx[static_cast<size_t>(operand_index(i, s.b, s.a))];
    EXPECT_TRUE(all_equal(y, Tensor::from_vector(expected, s.b, DType::F64)));
    if (shape_numel(s.b) <= 64) {
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return expand(in[0], s.b); }, {x}, gen));
    }
  }
}

class ExpandDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(ExpandDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const ShapePair& s : expand_cases()) {
    SCOPED_TRACE(shape_str(s.a) + " to " + shape_str(s.b));
    EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return expand(in[0], s.b); },
                                      {random_tensor(s.a, DType::F64, kCPU, gen)}, p.device, p.dtype, gen,
                                      forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ExpandDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// ---- comparisons

struct CompareCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<bool(double, double)> formula;
};
void PrintTo(const CompareCase& c, std::ostream* out) { *out << c.name; }

std::vector<CompareCase> compare_cases() {
  return {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double a, double b) { return a == b; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double a, double b) { return a != b; }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double a, double b) { return a < b; }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double a, double b) { return a <= b; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double a, double b) { return a > b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double a, double b) { return a >= b; }},
      {"compare_ge", [](const Tensor& a, const Tensor& b) { return compare(CompareOp::Ge, a, b); },
       [](double a, double b) { return a >= b; }},
  };
}

/// Values on a coarse grid (halves in [-3, 3], integers for integer dtypes) so ties are common,
/// and exactly representable in every dtype.
Tensor tie_heavy(const Shape& shape, DType dtype, Generator& gen) {
  std::vector<double> v = Tensor::rand(shape, gen, DType::F64, kCPU).to_vector();
  const double step = is_floating(dtype) ? 0.5 : 1.0;
  for (double& x : v) x = std::floor(x * 13.0 - 6.5) * step;
  return Tensor::from_vector(v, shape, dtype, kCPU);
}

const std::vector<DType> kAllDTypes = {DType::F64, DType::F32, DType::BF16, DType::I32, DType::I64};

class CompareTest : public ::testing::TestWithParam<CompareCase> {};

TEST_P(CompareTest, CpuMatchesFormulaForEveryDType) {
  const CompareCase& c = GetParam();
  Generator gen = test_generator();
  for (DType dtype : kAllDTypes) {
    for (const ShapePair& s : {ShapePair{{33, 17}, {33, 17}}, ShapePair{{33, 17}, {33, 1}}, ShapePair{{17}, {33, 17}}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(s.a) + " with " + shape_str(s.b));
      const Tensor a = tie_heavy(s.a, dtype, gen), b = tie_heavy(s.b, dtype, gen);
      const Tensor y = c.op(a, b);
      const Shape out = broadcast_of(s.a, s.b);
      ASSERT_EQ(y.shape(), out);
      ASSERT_EQ(y.dtype(), DType::U8);
      const std::vector<double> va = a.to_vector(), vb = b.to_vector(), vy = y.to_vector();
      int64_t trues = 0;
      for (int64_t i = 0; i < shape_numel(out); ++i) {
        const bool expected = c.formula(va[static_cast<size_t>(operand_index(i, out, s.a))],
                                        vb[static_cast<size_t>(operand_index(i, out, s.b))]);
        ASSERT_EQ(vy[static_cast<size_t>(i)], expected ? 1.0 : 0.0) << "element " << i;
        trues += expected;
      }
      // The grid makes both outcomes (and ties) occur, so the check above is not vacuous.
      EXPECT_GT(trues, 0);
      EXPECT_LT(trues, shape_numel(out));
    }
  }
}

TEST_P(CompareTest, HasNoGradient) {
  Generator gen = test_generator();
  Tensor a = random_tensor({4, 3}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor b = random_tensor({3}, DType::F64, kCPU, gen);
  const Tensor y = GetParam().op(a, b);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

TEST_P(CompareTest, CudaMatchesCpuExactly) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  const CompareCase& c = GetParam();
  Generator gen = test_generator();
  for (DType dtype : kAllDTypes) {
    for (const ShapePair& s : {ShapePair{{33, 257}, {33, 257}}, ShapePair{{33, 257}, {33, 1}},
                               ShapePair{{257}, {3, 257}}, ShapePair{{1}, {129}}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(s.a) + " with " + shape_str(s.b));
      const Tensor a = tie_heavy(s.a, dtype, gen), b = tie_heavy(s.b, dtype, gen);
      const Tensor y = c.op(a.to(kCUDA), b.to(kCUDA));
      ASSERT_TRUE(y.is_cuda());
      ASSERT_EQ(y.dtype(), DType::U8);
      EXPECT_TRUE(all_equal(y, c.op(a, b)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CompareTest, ::testing::ValuesIn(compare_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- where

/// A u8 condition with both values present.
Tensor random_cond(const Shape& shape, Generator& gen) {
  std::vector<double> v = Tensor::rand(shape, gen, DType::F64, kCPU).to_vector();
  for (size_t i = 0; i < v.size(); ++i) v[i] = i == 0 ? 1.0 : i == 1 ? 0.0 : (v[i] < 0.5 ? 1.0 : 0.0);
  return Tensor::from_vector(v, shape, DType::U8);
}

struct WhereShapes {
  Shape cond, a, b;
};
std::vector<WhereShapes> where_shapes() {
  return {{{33, 129}, {33, 129}, {33, 129}}, {{33, 1}, {33, 129}, {129}}, {{129}, {1}, {33, 129}}, {{3}, {3}, {3}}};
}

TEST(WhereTest, CpuF64MatchesFormula) {
  Generator gen = test_generator();
  for (const WhereShapes& s : where_shapes()) {
    const Tensor c = random_cond(s.cond, gen);
    const Tensor a = random_tensor(s.a, DType::F64, kCPU, gen), b = random_tensor(s.b, DType::F64, kCPU, gen);
    const Tensor y = where(c, a, b);
    const Shape out = broadcast_of(s.cond, broadcast_of(s.a, s.b));
    ASSERT_EQ(y.shape(), out);
    const std::vector<double> vc = c.to_vector(), va = a.to_vector(), vb = b.to_vector();
    std::vector<double> expected(static_cast<size_t>(shape_numel(out)));
    for (int64_t i = 0; i < shape_numel(out); ++i)
      expected[static_cast<size_t>(i)] = vc[static_cast<size_t>(operand_index(i, out, s.cond))] != 0
                                             ? va[static_cast<size_t>(operand_index(i, out, s.a))]
                                             : vb[static_cast<size_t>(operand_index(i, out, s.b))];
    EXPECT_TRUE(all_equal(y, Tensor::from_vector(expected, out, DType::F64)));
  }
}

TEST(WhereTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const WhereShapes& s : {WhereShapes{{3, 5}, {3, 5}, {3, 5}}, WhereShapes{{3, 1}, {3, 5}, {5}},
                               WhereShapes{{5}, {1}, {3, 5}}}) {
    const Tensor c = random_cond(s.cond, gen);
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); },
                          {c, random_tensor(s.a, DType::F64, kCPU, gen), random_tensor(s.b, DType::F64, kCPU, gen)},
                          gen));
  }
}

// where moves elements by width; every width must pick the same elements as the CPU.
TEST(WhereTest, EveryDTypeCudaMatchesCpu) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : {DType::I64, DType::I32, DType::F64, DType::F32, DType::BF16, DType::U8}) {
    const Tensor c = random_cond({33, 1}, gen);
    Tensor a, b;
    if (dtype == DType::U8) {  // u8 values are themselves comparison results
      a = gt(tie_heavy({33, 129}, DType::F32, gen), tie_heavy({33, 129}, DType::F32, gen));
      b = le(tie_heavy({129}, DType::F32, gen), tie_heavy({129}, DType::F32, gen));
    } else {
      a = tie_heavy({33, 129}, dtype, gen);
      b = tie_heavy({129}, dtype, gen);
    }
    EXPECT_TRUE(all_equal(where(c.to(kCUDA), a.to(kCUDA), b.to(kCUDA)), where(c, a, b))) << dtype_name(dtype);
  }
}

class WhereDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(WhereDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const WhereShapes& s : where_shapes()) {
    SCOPED_TRACE(shape_str(s.cond) + " " + shape_str(s.a) + " " + shape_str(s.b));
    EXPECT_TRUE(matches_f64_reference(
        [](const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); },
        {random_cond(s.cond, gen), random_tensor(s.a, DType::F64, kCPU, gen), random_tensor(s.b, DType::F64, kCPU, gen)},
        p.device, p.dtype, gen, forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, WhereDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// ---- cast

TEST(CastTest, F64ToF32RoundsLikeStaticCast) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({257}, DType::F64, kCPU, gen);
  const Tensor y = cast(x, DType::F32);
  ASSERT_EQ(y.dtype(), DType::F32);
  const std::vector<double> vx = x.to_vector(), vy = y.to_vector();
  for (size_t i = 0; i < vx.size(); ++i) EXPECT_EQ(vy[i], static_cast<double>(static_cast<float>(vx[i]))) << i;
}

// bf16 keeps the top 16 bits of an f32; the cast must give the nearest such value.
TEST(CastTest, F32ToBF16RoundsToNearest) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({1000}, DType::F32, kCPU, gen);
  const std::vector<double> vx = x.to_vector(), vy = cast(x, DType::BF16).to_vector();
  auto from_bits = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return static_cast<double>(f);
  };
  for (size_t i = 0; i < vx.size(); ++i) {
    ASSERT_EQ(std::signbit(vy[i]), std::signbit(vx[i])) << i;
    // Work on magnitudes, where the bf16 neighbours of |y| are its bits ± 0x10000.
    const float y = static_cast<float>(std::abs(vy[i]));
    const double ax = std::abs(vx[i]);
    uint32_t bits;
    std::memcpy(&bits, &y, 4);
    ASSERT_EQ(bits & 0xffffu, 0u) << "element " << i << " is not a bf16 value";
    const double err = std::abs(static_cast<double>(y) - ax);
    EXPECT_LE(err, std::abs(from_bits(bits + 0x10000u) - ax)) << i;
    if (bits >= 0x10000u) {
      EXPECT_LE(err, std::abs(from_bits(bits - 0x10000u) - ax)) << i;
    }
  }
}

TEST(CastTest, FloatToIntegerTruncatesTowardZero) {
  Generator gen = test_generator();
  const Tensor x = affine(random_tensor({200}, DType::F64, kCPU, gen), 100.0, 0.0);
  const std::vector<double> vx = x.to_vector();
  for (DType to : {DType::I32, DType::I64}) {
    const std::vector<double> vy = cast(x, to).to_vector();
    for (size_t i = 0; i < vx.size(); ++i) EXPECT_EQ(vy[i], std::trunc(vx[i])) << dtype_name(to) << " " << i;
  }
}

TEST(CastTest, IntegersToFloatAreExact) {
  std::vector<double> v;
  for (int i = -1000; i <= 1000; i += 7) v.push_back(i);
  for (DType from : {DType::I32, DType::I64}) {
    const Tensor x = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, from);
    for (DType to : {DType::F32, DType::F64, DType::I64, DType::I32}) {
      EXPECT_EQ(cast(x, to).to_vector(), v) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

// Regression: the CPU loops once read i32 elements through an f32 accumulator, so i32 values
// above 2^24 lost their low bits in casts, comparisons and to_vector(). Ids above 2^24 are
// realistic (hashed DLRM categories), and CUDA reads them as doubles.
TEST(CastTest, LargeI32ValuesSurviveCastAndRead) {
  const std::vector<double> v = {16777217.0, 2147483647.0, -2147483647.0, 123456789.0};
  const Tensor x = Tensor::from_vector(v, {4}, DType::I32);
  EXPECT_EQ(x.to_vector(), v);
  EXPECT_EQ(cast(x, DType::I64).to_vector(), v);
  EXPECT_EQ(cast(x, DType::F64).to_vector(), v);
  const Tensor neighbour = Tensor::from_vector({16777216.0}, {1}, DType::I32);
  EXPECT_EQ(eq(x.narrow(0, 0, 1), neighbour).item(), 0.0);
}

// Regression: the CPU once converted f64 to bf16 through f32 (two roundings), which is not
// always the nearest bf16. 102.25 + 2^-30 lies just above the midpoint of the bf16 neighbours
// 102 and 102.5: rounding it to f32 lands exactly on the midpoint, which then ties to even
// (102). CUDA rounds once (__double2bfloat16) and gives 102.5.
TEST(CastTest, F64ToBF16RoundsOnceToTheNearest) {
  const double value = 102.25 + std::ldexp(1.0, -30);
  const Tensor x = Tensor::from_vector({value, -value}, {2}, DType::F64);
  EXPECT_EQ(x.to_vector(), (std::vector<double>{value, -value}));
  EXPECT_EQ(cast(x, DType::BF16).to_vector(), (std::vector<double>{102.5, -102.5}));
  EXPECT_EQ(Tensor::from_vector({value}, {1}, DType::BF16).item(), 102.5);
  EXPECT_EQ(Tensor::full({1}, value, DType::BF16).item(), 102.5);
  if (!cuda_available()) return;
  EXPECT_EQ(cast(x.to(kCUDA), DType::BF16).to_vector(), (std::vector<double>{102.5, -102.5}));
  EXPECT_EQ(Tensor::full({1}, value, DType::BF16, kCUDA).item(), 102.5);
}

TEST(CastTest, GradientIsCastBack) {
  Generator gen = test_generator();
  Tensor x = random_tensor({3, 5}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor y = cast(x, DType::F32);
  ASSERT_TRUE(y.requires_grad());
  const Tensor w = random_tensor({3, 5}, DType::F32, kCPU, gen);
  y.backward(w);
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::F64);
  EXPECT_TRUE(all_equal(x.grad(), w));  // f32 -> f64 is exact
  // A chain through f32 and back is differentiable end to end.
  Tensor z = random_tensor({4}, DType::F64, kCPU, gen).requires_grad_();
  sum_all(cast(cast(z, DType::BF16), DType::F64) * 2.0).backward();
  EXPECT_TRUE(all_equal(z.grad(), Tensor::full({4}, 2.0, DType::F64)));
}

// Central differences through an f32 round trip. eps = 1e-2 keeps f32's rounding (about 1e-7
// of |x|) out of the quotient's first four digits; the derivative itself is exactly 1.
TEST(CastTest, GradCheckThroughF32) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return cast(cast(in[0], DType::F32), DType::F64); },
                        {random_tensor({3, 5}, DType::F64, kCPU, gen)}, gen, {.eps = 1e-2, .tol = 1e-4}));
}

TEST(CastTest, CastToIntegerHasNoGradient) {
  Generator gen = test_generator();
  Tensor x = random_tensor({4}, DType::F64, kCPU, gen).requires_grad_();
  EXPECT_FALSE(cast(x, DType::I64).requires_grad());
  EXPECT_FALSE(cast(x, DType::U8).requires_grad());
}

TEST(CastTest, CudaMatchesCpuForEveryPair) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  // Values in [0, 200) with fractions: representable in u8 after truncation, so every pair is defined.
  std::vector<double> v = Tensor::rand({1029}, gen, DType::F64).to_vector();
  for (double& x : v) x *= 200.0;
  const std::vector<DType> dtypes = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8};
  for (DType from : dtypes) {
    const Tensor x = Tensor::from_vector(v, {1029}, from);
    for (DType to : dtypes) {
      const Tensor y = cast(x.to(kCUDA), to);
      ASSERT_EQ(y.dtype(), to);
      EXPECT_TRUE(all_equal(y, cast(x, to))) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

class CastDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(CastDeviceTest, ToF64MatchesReference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1}, Shape{33, 129}}) {
    EXPECT_TRUE(matches_f64_reference([](const std::vector<Tensor>& in) { return cast(in[0], DType::F64) * 1.5; },
                                      {random_tensor(shape, DType::F64, kCPU, gen)}, p.device, p.dtype, gen,
                                      forward_tolerance(DType::F64), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, CastDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

TEST(ScalarLikeTest, HasOneElementOfTheTensorsDTypeAndDevice) {
  const Tensor x = Tensor::zeros({2, 3}, DType::BF16);
  const Tensor s = scalar_like(x, 1.5);
  EXPECT_EQ(s.shape(), Shape{1});
  EXPECT_EQ(s.dtype(), DType::BF16);
  EXPECT_EQ(s.item(), 1.5);
}

}  // namespace
}  // namespace ft
