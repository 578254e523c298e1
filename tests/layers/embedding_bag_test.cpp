// EmbeddingBagCollection's tables: drawn in pieces and chunks they equal the whole tables'
// rows, and tables built on the GPU are drawn there (state included) with the same values.
#include <gtest/gtest.h>

#include "layers/embedding_bag.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using test::max_rel_error;
using test::test_generator;

TEST(EmbeddingBagCollectionTest, RowsDrawnInPiecesAndChunksEqualTheWholeTables) {
  Generator gen = test_generator();
  const int64_t dim = 6;
  const std::vector<int64_t> rows = {37, 5, 120};
  EmbeddingBagCollection whole({.table_rows = rows, .dim = dim}, gen);
  // The same generator state, replayed: each table's offset as the constructor took it.
  Generator replay = test_generator();
  std::vector<uint64_t> offset;
  for (int64_t r : rows) offset.push_back(replay.advance(static_cast<uint64_t>(r * dim)));
  // Rows 3..31 of table 0, all of table 1, rows 60..119 of table 2, in chunks of 2 rows.
  const Tensor drawn = EmbeddingBagCollection::draw_rows(
      {{.rows = 37, .first = 3, .count = 29, .offset = offset[0]},
       {.rows = 5, .first = 0, .count = 5, .offset = offset[1]},
       {.rows = 120, .first = 60, .count = 60, .offset = offset[2]}},
      dim, replay.seed(), kCPU, /*chunk_elements=*/2 * dim + 1);
  const Tensor expected =
      cat({whole.weight().narrow(0, 3, 29), whole.weight().narrow(0, 37, 5), whole.weight().narrow(0, 42 + 60, 60)}, 0);
  EXPECT_EQ(drawn.to_vector(), expected.to_vector());
}

TEST(EmbeddingBagCollectionTest, TablesBuiltOnTheGpuAreDrawnThere) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  const EmbeddingTablesOptions options{
      .table_rows = {1000, 3, 77}, .dim = 32, .update = RowUpdateKind::ElementwiseAdagrad};
  Generator cpu_gen = test_generator(), gpu_gen = test_generator();
  EmbeddingBagCollection on_cpu(options, cpu_gen);
  EmbeddingTablesOptions gpu_options = options;
  gpu_options.device = kCUDA;
  EmbeddingBagCollection on_gpu(gpu_options, gpu_gen);
  EXPECT_TRUE(on_gpu.weight().is_cuda());
  EXPECT_TRUE(on_gpu.accumulator().is_cuda());
  // The uniforms are the same bits on both; the affine map may round once differently (a fused
  // multiply-add on the GPU), so one f32 rounding apart at most.
  EXPECT_LE(max_rel_error(on_gpu.weight().to(kCPU), on_cpu.weight()), 1.2e-7);
  EXPECT_EQ(on_gpu.accumulator().to(kCPU).to_vector(), std::vector<double>(1080 * 32, 0.0));
}

}  // namespace
}  // namespace ft
