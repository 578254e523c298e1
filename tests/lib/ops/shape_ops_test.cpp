// Shape primitives: reshape, transpose, narrow (leading, inner and middle dims), cat and
// gather_rows. CPU values against index arithmetic written here, which ones are views, gradient
// checks in f64, and every device × dtype against the CPU f64 reference.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "lib/ops/shape_ops/shape_ops.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

// ---- reshape

TEST(ReshapeTest, KeepsValuesAndIsAView) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({2, 3, 5}, DType::F64, kCPU, gen);
  for (const Shape& shape : {Shape{30}, Shape{5, 6}, Shape{5, -1}, Shape{-1, 1, 3}, Shape{1, 30, 1}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor y = reshape(x, shape);
    EXPECT_EQ(y.numel(), 30);
    EXPECT_EQ(y.to_vector(), x.to_vector());
    EXPECT_TRUE(y.shares_storage(x));
  }
  EXPECT_EQ(reshape(x, {5, -1}).shape(), (Shape{5, 6}));
  EXPECT_EQ(x.reshape({-1}).shape(), Shape{30});
}

TEST(ReshapeTest, GradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return reshape(in[0], {4, -1}); },
                        {random_tensor({2, 3, 2}, DType::F64, kCPU, gen)}, gen));
}

// ---- transpose

const std::vector<Shape> kTransposeShapes = {{1, 1}, {3, 5}, {33, 129}, {129, 33}, {2, 33, 65}, {4, 1, 7}, {1, 257}};

std::vector<double> reference_transpose(const std::vector<double>& v, const Shape& s) {
  const int64_t rows = s[s.size() - 2], cols = s.back(), batch = shape_numel(s) / (rows * cols);
  std::vector<double> out(v.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[static_cast<size_t>((b * cols + c) * rows + r)] = v[static_cast<size_t>((b * rows + r) * cols + c)];
  return out;
}

TEST(TransposeTest, CpuMatchesIndexing) {
  Generator gen = test_generator();
  for (const Shape& shape : kTransposeShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor x = random_tensor(shape, DType::F64, kCPU, gen);
    const Tensor y = transpose(x);
    Shape expected = shape;
    std::swap(expected[expected.size() - 1], expected[expected.size() - 2]);
    ASSERT_EQ(y.shape(), expected);
    EXPECT_EQ(y.to_vector(), reference_transpose(x.to_vector(), shape));
    EXPECT_EQ(x.transpose().to_vector(), y.to_vector());
  }
}

TEST(TransposeTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}}) {
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return transpose(in[0]); },
                          {random_tensor(shape, DType::F64, kCPU, gen)}, gen));
  }
}

// ---- narrow

struct NarrowCase {
  Shape shape;
  int64_t dim, start, length;
  bool view;  // the header's rule: every outer dim is 1 (always so for the leading dim)
};

std::string narrow_name(const NarrowCase& c) {
  return shape_str(c.shape) + " dim " + std::to_string(c.dim) + " [" + std::to_string(c.start) + ", " +
         std::to_string(c.start + c.length) + ")";
}

std::vector<NarrowCase> narrow_cases() {
  return {
      {{33, 129}, 0, 5, 17, true},      // leading dim
      {{33, 129}, 0, 0, 33, true},      // all of it
      {{33, 129}, 1, 3, 65, false},     // inner dim
      {{33, 129}, -1, 128, 1, false},   // negative dim, last column
      {{2, 33, 5}, 1, 1, 31, false},    // middle dim
      {{1, 33, 5}, 1, 2, 7, true},      // outer dims of size 1
      {{257}, 0, 1, 255, true},
      {{4, 3}, 0, 2, 0, true},          // empty
  };
}

/// narrow in doubles: the [outer, size, inner] split around dim d.
std::vector<double> reference_narrow(const std::vector<double>& v, const NarrowCase& c) {
  const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= c.shape[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(d) + 1; k < c.shape.size(); ++k) inner *= c.shape[k];
  const int64_t size = c.shape[static_cast<size_t>(d)];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = c.start; i < c.start + c.length; ++i)
      for (int64_t j = 0; j < inner; ++j) out.push_back(v[static_cast<size_t>((o * size + i) * inner + j)]);
  return out;
}

TEST(NarrowTest, CpuMatchesIndexingAndViewRule) {
  Generator gen = test_generator();
  for (const NarrowCase& c : narrow_cases()) {
    SCOPED_TRACE(narrow_name(c));
    const Tensor x = random_tensor(c.shape, DType::F64, kCPU, gen);
    const Tensor y = narrow(x, c.dim, c.start, c.length);
    EXPECT_EQ(y.to_vector(), reference_narrow(x.to_vector(), c));
    EXPECT_EQ(y.shares_storage(x), c.view);
    EXPECT_EQ(x.narrow(c.dim, c.start, c.length).to_vector(), y.to_vector());
  }
}

TEST(NarrowTest, LeadingDimViewSeesWritesToTheBase) {
  const Tensor x = Tensor::arange(12, DType::F32).reshape({4, 3});
  const Tensor rows = x.narrow(0, 1, 2);
  ASSERT_TRUE(rows.shares_storage(x));
  rows.copy_(Tensor::full({2, 3}, -1.0));
  EXPECT_EQ(x.to_vector(), (std::vector<double>{0, 1, 2, -1, -1, -1, -1, -1, -1, 9, 10, 11}));
}

TEST(NarrowTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const NarrowCase& c : {NarrowCase{{5, 4}, 0, 1, 3, true}, NarrowCase{{5, 4}, 1, 1, 2, false},
                              NarrowCase{{2, 5, 3}, 1, 2, 3, false}, NarrowCase{{2, 3, 4}, -1, 0, 1, false}}) {
    SCOPED_TRACE(narrow_name(c));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return narrow(in[0], c.dim, c.start, c.length); },
                          {random_tensor(c.shape, DType::F64, kCPU, gen)}, gen));
  }
}

class NarrowDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(NarrowDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const NarrowCase& c : narrow_cases()) {
    SCOPED_TRACE(narrow_name(c));
    const Tensor x = random_tensor(c.shape, DType::F64, kCPU, gen);
    EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return narrow(in[0], c.dim, c.start, c.length); },
                                      {x}, p.device, p.dtype, gen, forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, NarrowDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// ---- cat

struct CatCase {
  std::vector<Shape> shapes;
  int64_t dim;
};

std::vector<CatCase> cat_cases() {
  return {
      {{{3, 129}, {1, 129}, {33, 129}}, 0},
      {{{33, 1}, {33, 65}, {33, 3}}, 1},
      {{{2, 3, 5}, {2, 1, 5}, {2, 4, 5}}, 1},
      {{{2, 3, 5}, {2, 3, 2}}, -1},
      {{{257}, {3}}, 0},
      {{{4, 2}}, 0},
  };
}

/// cat in doubles: for each outer index, each input's slab in turn.
std::vector<double> reference_cat(const std::vector<std::vector<double>>& values, const CatCase& c) {
  const Shape& s0 = c.shapes[0];
  const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(s0.size()) : c.dim;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= s0[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(d) + 1; k < s0.size(); ++k) inner *= s0[k];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t t = 0; t < values.size(); ++t) {
      const int64_t slab = c.shapes[t][static_cast<size_t>(d)] * inner;
      out.insert(out.end(), values[t].begin() + o * slab, values[t].begin() + (o + 1) * slab);
    }
  return out;
}

std::string cat_name(const CatCase& c) {
  std::ostringstream s;
  s << "dim " << c.dim << ":";
  for (const Shape& shape : c.shapes) s << " " << shape_str(shape);
  return s.str();
}

TEST(CatTest, CpuMatchesIndexing) {
  Generator gen = test_generator();
  for (const CatCase& c : cat_cases()) {
    SCOPED_TRACE(cat_name(c));
    std::vector<Tensor> xs;
    std::vector<std::vector<double>> values;
    for (const Shape& s : c.shapes) {
      xs.push_back(random_tensor(s, DType::F64, kCPU, gen));
      values.push_back(xs.back().to_vector());
    }
    const Tensor y = cat(xs, c.dim);
    EXPECT_EQ(y.to_vector(), reference_cat(values, c));
  }
}

TEST(CatTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const CatCase& c : {CatCase{{{2, 3}, {1, 3}, {3, 3}}, 0}, CatCase{{{2, 1}, {2, 3}}, 1},
                           CatCase{{{2, 2, 3}, {2, 1, 3}}, 1}}) {
    SCOPED_TRACE(cat_name(c));
    std::vector<Tensor> xs;
    for (const Shape& s : c.shapes) xs.push_back(random_tensor(s, DType::F64, kCPU, gen));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return cat(in, c.dim); }, xs, gen));
  }
}

class CatDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(CatDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const CatCase& c : cat_cases()) {
    SCOPED_TRACE(cat_name(c));
    std::vector<Tensor> xs;
    for (const Shape& s : c.shapes) xs.push_back(random_tensor(s, DType::F64, kCPU, gen));
    EXPECT_TRUE(matches_f64_reference([&](const std::vector<Tensor>& in) { return cat(in, c.dim); }, xs, p.device,
                                      p.dtype, gen, forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, CatDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// ---- gather_rows

struct GatherCase {
  int64_t rows, cols;
  Shape ids;
  DType id_dtype;
};

// Row widths of 1, 3, 8 and 33 elements reach every word width the CUDA kernel picks (16-, 4-
// and 2-byte words for f32 and bf16); ids repeat, so the backward scatter must add.
std::vector<GatherCase> gather_cases() {
  return {{10, 8, {37}, DType::I64}, {10, 3, {2, 3}, DType::I32}, {5, 1, {129}, DType::I64},
          {257, 33, {33}, DType::I32}, {1, 4, {3}, DType::I64}, {7, 2, {1}, DType::I32}};
}

std::string gather_name(const GatherCase& c) {
  return "table [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) + "] ids " + shape_str(c.ids) + " " +
         dtype_name(c.id_dtype);
}

TEST(GatherRowsTest, CpuMatchesIndexing) {
  Generator gen = test_generator();
  for (const GatherCase& c : gather_cases()) {
    SCOPED_TRACE(gather_name(c));
    const Tensor table = random_tensor({c.rows, c.cols}, DType::F64, kCPU, gen);
    const Tensor ids = random_ids(c.ids, c.rows, c.id_dtype, kCPU, gen);
    const Tensor y = gather_rows(table, ids);
    Shape expected_shape = c.ids;
    expected_shape.push_back(c.cols);
    ASSERT_EQ(y.shape(), expected_shape);
    const std::vector<double> vt = table.to_vector(), vi = ids.to_vector();
    std::vector<double> expected;
    for (double id : vi)
      for (int64_t j = 0; j < c.cols; ++j) expected.push_back(vt[static_cast<size_t>(static_cast<int64_t>(id) * c.cols + j)]);
    EXPECT_EQ(y.to_vector(), expected);
  }
}

TEST(GatherRowsTest, RepeatedIdsAccumulateGradient) {
  Tensor table = Tensor::zeros({4, 2}, DType::F64).requires_grad_();
  const Tensor ids = Tensor::from_vector({2, 0, 2, 2}, {4}, DType::I64);
  gather_rows(table, ids).backward(Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, DType::F64));
  EXPECT_EQ(table.grad().to_vector(), (std::vector<double>{3, 4, 0, 0, 1 + 5 + 7, 2 + 6 + 8, 0, 0}));
}

TEST(GatherRowsTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const GatherCase& c : {GatherCase{6, 3, {9}, DType::I64}, GatherCase{4, 2, {2, 3}, DType::I32}}) {
    SCOPED_TRACE(gather_name(c));
    const Tensor ids = random_ids(c.ids, c.rows, c.id_dtype, kCPU, gen);
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return gather_rows(in[0], in[1]); },
                          {random_tensor({c.rows, c.cols}, DType::F64, kCPU, gen), ids}, gen));
  }
}

class GatherRowsDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(GatherRowsDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const GatherCase& c : gather_cases()) {
    SCOPED_TRACE(gather_name(c));
    const Tensor ids = random_ids(c.ids, c.rows, c.id_dtype, kCPU, gen);
    EXPECT_TRUE(matches_f64_reference([](const std::vector<Tensor>& in) { return gather_rows(in[0], in[1]); },
                                      {random_tensor({c.rows, c.cols}, DType::F64, kCPU, gen), ids}, p.device,
                                      p.dtype, gen, forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GatherRowsDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// ---- permute_rows

std::vector<int64_t> random_order(int64_t n, Generator& gen) {
  const std::vector<double> keys = Tensor::rand({n}, gen).to_vector();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)]; });
  return order;
}

TEST(PermuteRowsTest, ForwardGathersAndGradientGoesBack) {
  Generator gen = test_generator();
  const std::vector<int64_t> order = random_order(37, gen);
  const RowPermutation p = RowPermutation::of(order, kCPU);
  Tensor x = random_tensor({37, 5}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor y = permute_rows(x, p);
  std::vector<double> ids(order.begin(), order.end());
  EXPECT_EQ(y.to_vector(), gather_rows(x.detach(), Tensor::from_vector(ids, {37}, DType::I64)).to_vector());
  // The gradient equals gather_rows's own (a scatter-add, which for a permutation places each row once).
  const Tensor g = random_tensor({37, 5}, DType::F64, kCPU, gen);
  y.backward(g);
  Tensor x2 = Tensor::from_vector(x.detach().to_vector(), {37, 5}, DType::F64).requires_grad_();
  gather_rows(x2, Tensor::from_vector(ids, {37}, DType::I64)).backward(g);
  EXPECT_EQ(x.grad().to_vector(), x2.grad().to_vector());
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return permute_rows(in[0], p); },
                        {random_tensor({37, 3}, DType::F64, kCPU, gen)}, gen));
}

TEST(PermuteRowsTest, RefusesWhatIsNotAPermutation) {
  EXPECT_FT_ERROR((void)RowPermutation::of({0, 2, 2}, kCPU), "not a permutation");
  EXPECT_FT_ERROR((void)RowPermutation::of({0, 3, 1}, kCPU), "not a permutation");
  const RowPermutation p = RowPermutation::of({1, 0, 2}, kCPU);
  EXPECT_FT_ERROR((void)permute_rows(Tensor::zeros({4, 2}), p), "orders 3 rows, x has 4");
}

class PermuteRowsDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(PermuteRowsDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {129, 3}, {1000, 64}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    const std::vector<int64_t> order = random_order(rows, gen);
    EXPECT_TRUE(matches_f64_reference(
        [&](const std::vector<Tensor>& in) { return permute_rows(in[0], RowPermutation::of(order, in[0].device())); },
        {random_tensor({rows, cols}, DType::F64, kCPU, gen)}, p.device, p.dtype, gen, forward_tolerance(p.dtype),
        grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PermuteRowsDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

// reshape and transpose on every device: the transposed tiles cover sizes around the 32-wide tile.
class ReshapeTransposeDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(ReshapeTransposeDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const Shape& shape : kTransposeShapes) {
    SCOPED_TRACE(shape_str(shape));
    EXPECT_TRUE(matches_f64_reference([](const std::vector<Tensor>& in) { return transpose(in[0]); },
                                      {random_tensor(shape, DType::F64, kCPU, gen)}, p.device, p.dtype, gen,
                                      forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
    EXPECT_TRUE(matches_f64_reference([](const std::vector<Tensor>& in) { return reshape(in[0], {-1, 1}); },
                                      {random_tensor(shape, DType::F64, kCPU, gen)}, p.device, p.dtype, gen,
                                      forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ReshapeTransposeDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

}  // namespace
}  // namespace ft
