// row_block_ids: a row-wise sharded table's lookups as one rank's block sees them. On the CPU
// and on CUDA, for i32 and i64 ids and f32 and bf16 weights, every id must come out as written
// here from the definition (its offset inside the block with weight 1, else the id mod the block's
// rows with weight 0),
// and an id outside its table must be an ft::Error.
#include <cmath>
#include <string>
#include <vector>

#include "lib/ops/row_block/row_block.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

class RowBlockTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { FT_SKIP_UNLESS_AVAILABLE(GetParam()); }
  Device device() const { return GetParam(); }
};

Tensor i64(const std::vector<double>& v, Device device) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::I64, device);
}

TEST_P(RowBlockTest, MatchesTheDefinition) {
  // Three tables of 50, 7 and 1000 rows; this rank's blocks [10, 27), [3, 5), [0, 334).
  const std::vector<double> rows = {50, 7, 1000}, begin = {10, 3, 0}, size = {17, 2, 334};
  Generator gen = test_generator();
  const int64_t samples = 301;
  const std::vector<double> u = Tensor::rand({samples, 3}, gen, DType::F64).to_vector();
  std::vector<double> ids(u.size());
  for (size_t i = 0; i < u.size(); ++i) ids[i] = static_cast<double>(static_cast<int64_t>(u[i] * rows[i % 3]));
  for (DType id_dtype : {DType::I32, DType::I64})
    for (DType weight_dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(id_dtype)) + " ids, " + dtype_name(weight_dtype) + " weights");
      const Tensor in = Tensor::from_vector(ids, {samples, 3}, id_dtype, device());
      const RowBlockIds out = row_block_ids(in, i64(rows, device()), i64(begin, device()), i64(size, device()),
                                            weight_dtype);
      ASSERT_EQ(out.ids.shape(), in.shape());
      ASSERT_EQ(out.ids.dtype(), id_dtype);
      ASSERT_EQ(out.weights.shape(), (Shape{samples * 3}));
      ASSERT_EQ(out.weights.dtype(), weight_dtype);
      const std::vector<double> local = out.ids.to(kCPU).to_vector(), weights = out.weights.to(kCPU).to_vector();
      int inside = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        const double at = ids[i] - begin[i % 3];
        const bool mine = at >= 0 && at < size[i % 3];
        inside += mine;
        EXPECT_EQ(local[i], mine ? at : std::fmod(ids[i], size[i % 3])) << "id " << i;
        EXPECT_EQ(weights[i], mine ? 1.0 : 0.0) << "id " << i;
      }
      EXPECT_GT(inside, 50);  // both cases are exercised
      EXPECT_LT(inside, static_cast<int>(ids.size()) - 50);
    }
}

TEST_P(RowBlockTest, AnIdOutsideItsTableIsAnError) {
  const Tensor rows = i64({50, 7}, device()), begin = i64({0, 3}, device()), size = i64({25, 4}, device());
  const Tensor bad = Tensor::from_vector({3, 7}, {1, 2}, DType::I32, device());  // table 1 has 7 rows
  EXPECT_TRUE(error_mentions([&] { (void)row_block_ids(bad, rows, begin, size, DType::F32).ids.to(kCPU); }, "out"));
  const Tensor negative = Tensor::from_vector({-1, 0}, {1, 2}, DType::I64, device());
  EXPECT_TRUE(
      error_mentions([&] { (void)row_block_ids(negative, rows, begin, size, DType::F32).weights.to(kCPU); }, "out"));
  if (device().is_cuda()) synchronize();  // the device stays usable
  EXPECT_FT_ERROR(row_block_ids(bad, i64({50}, device()), begin, size, DType::F32), "table_rows");
  EXPECT_FT_ERROR(row_block_ids(Tensor::zeros({1, 2}), rows, begin, size, DType::F32), "i32 or i64");
}

INSTANTIATE_TEST_SUITE_P(Devices, RowBlockTest, ::testing::Values(kCPU, kCUDA),
                         [](const auto& info) { return std::string(info.param.is_cuda() ? "cuda" : "cpu"); });

}  // namespace
}  // namespace ft
