// Elementwise primitives that select or convert: expand, comparisons, where and cast. Each op is
// checked as in elementwise_test.cpp: CPU values against a formula written out here, a gradient
// check in f64 where it has a gradient, and every device × dtype against the CPU reference.
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
