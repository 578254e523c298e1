// softmax and log_softmax over the last dim, and gather_last (cross-entropy's pick of the
// target's log-probability): CPU f64 values against formulas written out here, gradient checks
// in f64, and every device × dtype (and bf16 in, f32 out) against the CPU f64 reference, on row
// lengths that take the CUDA kernels' packed and one-element paths, short rows and rows longer
// than one block of threads.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/ops/softmax/softmax.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

struct SoftmaxCase {
  std::string name;
  bool log;
};
void PrintTo(const SoftmaxCase& c, std::ostream* out) { *out << c.name; }

std::vector<SoftmaxCase> softmax_cases() { return {{"softmax", false}, {"log_softmax", true}}; }

Tensor run(const SoftmaxCase& c, const Tensor& x, DType dtype) { return c.log ? log_softmax(x, dtype) : softmax(x, dtype); }
Tensor run(const SoftmaxCase& c, const Tensor& x) { return c.log ? log_softmax(x) : softmax(x); }

/// Each row's softmax (or log-softmax) in doubles, written out: exp(x) / Σ exp(x) after
/// subtracting the row's largest finite element.
std::vector<double> reference(const SoftmaxCase& c, const std::vector<double>& v, int64_t cols) {
  std::vector<double> out(v.size());
  for (size_t r = 0; r * static_cast<size_t>(cols) < v.size(); ++r) {
    const auto row = v.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(cols));
    const double m = *std::max_element(row, row + cols);
    double s = 0.0;
    for (int64_t k = 0; k < cols; ++k) s += std::exp(row[k] - m);
    for (int64_t k = 0; k < cols; ++k)
      out[r * static_cast<size_t>(cols) + static_cast<size_t>(k)] = c.log ? row[k] - m - std::log(s) : std::exp(row[k] - m) / s;
  }
  return out;
}

// 4100 and 5000 columns need more than one pass of 1024 threads; 5, 1 and 257 columns cannot
// be read in packs of four; 1024 is attention's row at T = 1024.
const std::vector<Shape> kDeviceShapes = {{1}, {3, 5}, {2, 1}, {4, 8}, {3, 257}, {2, 3, 1024}, {2, 4100}, {1, 5000}};

class SoftmaxTest : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(SoftmaxTest, CpuF64MatchesFormula) {
  const SoftmaxCase& c = GetParam();
  Generator gen = test_generator();
  for (const Shape& shape : kDeviceShapes) {
    SCOPED_TRACE(shape_str(shape));
    // Scores spread over [-30, 30]: exp of the unshifted values would overflow nothing here,
    // but the shift still decides the rounding.
    const Tensor x = uniform_tensor(shape, DType::F64, kCPU, gen, -30.0, 30.0);
    const Tensor y = run(c, x);
    ASSERT_EQ(y.shape(), shape);
    EXPECT_TRUE(all_close(y, Tensor::from_vector(reference(c, x.to_vector(), shape.back()), shape, DType::F64), 1e-13));
  }
}

TEST_P(SoftmaxTest, GradCheckF64) {
  const SoftmaxCase& c = GetParam();
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{4}, Shape{3, 7}, Shape{2, 3, 5}, Shape{3, 1}}) {
    SCOPED_TRACE(shape_str(shape));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return run(c, in[0]); },
                          {random_tensor(shape, DType::F64, kCPU, gen)}, gen));
  }
}

// A causal-style mask: -inf entries get probability 0 and leave the others a distribution.
TEST_P(SoftmaxTest, MaskedEntriesGetNothing) {
  const SoftmaxCase& c = GetParam();
  if (c.log) GTEST_SKIP() << "log_softmax of -inf is -inf, covered by the formula";
  Generator gen = test_generator();
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    SCOPED_TRACE(device.str());
    const int64_t t = 37;
    const Tensor cols = Tensor::arange(t, DType::I64, device);
    const Tensor visible = le(cols, cols.reshape({t, 1}));
    const Tensor x = random_tensor({2, t, t}, DType::F32, device, gen);
    const Tensor y = softmax(where(visible, x, scalar_like(x, -std::numeric_limits<double>::infinity())));
    const std::vector<double> v = y.to_vector();
    for (int64_t r = 0; r < 2 * t; ++r) {
      double total = 0.0;
      for (int64_t k = 0; k < t; ++k) {
        const double p = v[static_cast<size_t>(r * t + k)];
        if (k > r % t) {
          EXPECT_EQ(p, 0.0) << "row " << r << " col " << k;
        }
        total += p;
      }
      EXPECT_NEAR(total, 1.0, 1e-5) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, SoftmaxTest, ::testing::ValuesIn(softmax_cases()),
                         [](const auto& info) { return info.param.name; });

class SoftmaxDeviceTest : public ::testing::TestWithParam<std::tuple<SoftmaxCase, DeviceDType>> {};

TEST_P(SoftmaxDeviceTest, MatchesF64Reference) {
  const auto& [c, p] = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const Shape& shape : kDeviceShapes) {
    SCOPED_TRACE(shape_str(shape));
    EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return run(c, in[0]); },
                                      {uniform_tensor(shape, DType::F64, kCPU, gen, -8.0, 8.0)}, p.device, p.dtype, gen,
                                      forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

// bf16 scores, f32 probabilities (attention's and cross-entropy's twins): the result is f32, the
// gradient bf16, both against the f64 reference of the same rounded inputs.
TEST_P(SoftmaxDeviceTest, Bf16InF32Out) {
  const auto& [c, p] = GetParam();
  if (p.dtype != DType::BF16) GTEST_SKIP() << "bf16 inputs only";
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const Shape& shape : kDeviceShapes) {
    SCOPED_TRACE(shape_str(shape));
    const auto f = [&](const std::vector<Tensor>& in) {
      const Tensor y = run(c, in[0], in[0].dtype() == DType::BF16 ? DType::F32 : in[0].dtype());
      EXPECT_EQ(y.dtype(), in[0].dtype() == DType::BF16 ? DType::F32 : DType::F64);
      return y;
    };
    EXPECT_TRUE(matches_f64_reference(f, {uniform_tensor(shape, DType::F64, kCPU, gen, -8.0, 8.0)}, p.device, p.dtype,
                                      gen, forward_tolerance(DType::F32), grad_tolerance(DType::BF16)));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, SoftmaxDeviceTest,
                         ::testing::Combine(::testing::ValuesIn(softmax_cases()), ::testing::ValuesIn(device_dtypes())),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + device_dtype_name(std::get<1>(info.param));
                         });

TEST(SoftmaxErrorsTest, RejectsBadInputs) {
  const Tensor ids = Tensor::from_vector({0, 1, 2}, {3}, DType::I64);
  EXPECT_FT_ERROR(softmax(ids), "floating");
  EXPECT_FT_ERROR(log_softmax(Tensor()), "log_softmax");
  EXPECT_FT_ERROR(softmax(Tensor::zeros({2, 3}, DType::F32), DType::BF16), "not bf16");
  EXPECT_FT_ERROR(softmax(Tensor::full({}, 1.0)), "scalar");
}

// ---- gather_last

TEST(GatherLastTest, CpuPicksOneElementARowAndGradCheck) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({2, 3, 5}, DType::F64, kCPU, gen);
  const Tensor ids = random_ids({2, 3}, 5, DType::I64, kCPU, gen);
  const Tensor y = gather_last(x, ids);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  const std::vector<double> vx = x.to_vector(), vi = ids.to_vector(), vy = y.to_vector();
  for (size_t r = 0; r < 6; ++r) EXPECT_EQ(vy[r], vx[r * 5 + static_cast<size_t>(vi[r])]);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return gather_last(in[0], ids); }, {x}, gen));
}

TEST(GatherLastTest, DevicesMatchF64Reference) {
  for (const DeviceDType& p : device_dtypes()) {
    if (p.device.is_cuda() && !cuda_available()) continue;
    SCOPED_TRACE(device_dtype_name(p));
    Generator gen = test_generator();
    for (DType id_dtype : {DType::I32, DType::I64}) {
      const Tensor ids = random_ids({33}, 1000, id_dtype, kCPU, gen);
      EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return gather_last(in[0], in[1]); },
                                        {random_tensor({33, 1000}, DType::F64, kCPU, gen), ids}, p.device, p.dtype, gen,
                                        0.0, 0.0));
    }
  }
}

TEST(GatherLastTest, RejectsBadInputs) {
  const Tensor x = Tensor::zeros({2, 4}, DType::F32);
  EXPECT_FT_ERROR(gather_last(x, Tensor::from_vector({0, 4}, {2}, DType::I64)), "out of range");
  EXPECT_FT_ERROR(gather_last(x, Tensor::from_vector({0, 1, 2}, {3}, DType::I64)), "without its last dim");
  EXPECT_FT_ERROR(gather_last(x, Tensor::from_vector({0, 1}, {2}, DType::F32)), "i32 or i64");
  if (!cuda_available()) return;
  Tensor out;
  EXPECT_NO_THROW(out = gather_last(x.to(kCUDA), Tensor::from_vector({0, -1}, {2}, DType::I64, kCUDA)));
  EXPECT_TRUE(error_mentions([] { synchronize(); }, "out of range"));
}

}  // namespace
}  // namespace ft
