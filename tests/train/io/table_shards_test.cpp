// Tables in checkpoints by rows: any rows of any table read back from the shard files of a
// sharded run (a read may span two ranks' pieces) or from one process's stacked tables, exactly;
// and the checkpoints that cannot serve a run refused with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include "train/io/safetensors.h"
#include "train/io/table_shards.h"

namespace ft {
namespace {

using test::random_tensor;
using test::test_generator;

const std::vector<int64_t> kRows = {7, 10};
constexpr int64_t kDim = 3;

struct Written {
  test::TempDir dir{"ft_table_shards"};
  Tensor table0, table1, acc1;  // the whole tables the pieces cut
};

/// Two ranks: rank 0 holds table 0 whole and rows [0, 5) of table 1; rank 1 rows [5, 10).
void write_two_shards(Written& w, Generator& gen) {
  w.table0 = random_tensor({7, kDim}, DType::F32, kCPU, gen);
  w.table1 = random_tensor({10, kDim}, DType::F32, kCPU, gen);
  w.acc1 = random_tensor({10}, DType::F32, kCPU, gen);
  const std::string folder = w.dir.path().string();
  write_table_shard(folder + "/" + table_shard_file(0),
                    {{0, 0, w.table0, Tensor()}, {1, 0, w.table1.narrow(0, 0, 5), w.acc1.narrow(0, 0, 5)}}, kRows, kDim, 0,
                    2);
  write_table_shard(folder + "/" + table_shard_file(1), {{1, 5, w.table1.narrow(0, 5, 5), w.acc1.narrow(0, 5, 5)}},
                    kRows, kDim, 1, 2);
}

TEST(TableShards, RowsComeBackFromAnyPieces) {
  Generator gen = test_generator();
  Written w;
  write_two_shards(w, gen);
  const StoredTables stored(w.dir.path().string(), "tables.", kRows, kDim);
  EXPECT_TRUE(stored.sharded());
  EXPECT_FALSE(stored.has_accumulators());  // table 0 was written without
  // Rows 3..8 of table 1 span both ranks' pieces.
  Tensor weight = Tensor::empty({6, kDim}), acc = Tensor::empty({6});
  stored.read(1, 3, 6, weight, acc);
  EXPECT_EQ(weight.to_vector(), w.table1.narrow(0, 3, 6).to_vector());
  EXPECT_EQ(acc.to_vector(), w.acc1.narrow(0, 3, 6).to_vector());
  Tensor whole0 = Tensor::empty({7, kDim});
  stored.read(0, 0, 7, whole0, Tensor());
  EXPECT_EQ(whole0.to_vector(), w.table0.to_vector());
  EXPECT_FT_ERROR(stored.read(0, 0, 7, whole0, Tensor::empty({7})), "no Adagrad accumulators for table 0");
  EXPECT_FT_ERROR(stored.read(1, 8, 3, Tensor::empty({3, kDim}), Tensor()), "do not exist");
  const auto shape = StoredTables::sharded_shape(w.dir.path().string());
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(shape->first, kRows);
  EXPECT_EQ(shape->second, kDim);
}

TEST(TableShards, OneProcessTablesAreReadFromTheModelFile) {
  Generator gen = test_generator();
  test::TempDir dir("ft_table_shards");
  const Tensor stacked = random_tensor({17, kDim}, DType::F32, kCPU, gen), acc = random_tensor({17}, DType::F32, kCPU, gen);
  save_safetensors((dir.path() / "model.safetensors").string(),
                   {{"tables.weight", stacked}, {"tables.accumulator", acc}, {"top.0.bias", Tensor::zeros({2})}});
  const StoredTables stored(dir.path().string(), "tables.", kRows, kDim);
  EXPECT_FALSE(stored.sharded());
  EXPECT_TRUE(stored.has_accumulators());
  EXPECT_FALSE(StoredTables::sharded_shape(dir.path().string()).has_value());
  Tensor weight = Tensor::empty({4, kDim}), got_acc = Tensor::empty({4});
  stored.read(1, 2, 4, weight, got_acc);  // rows 7 + 2 .. 7 + 5 of the stack
  EXPECT_EQ(weight.to_vector(), stacked.narrow(0, 9, 4).to_vector());
  EXPECT_EQ(got_acc.to_vector(), acc.narrow(0, 9, 4).to_vector());
  EXPECT_FT_ERROR(StoredTables(dir.path().string(), "tables.", {7, 11}, kDim), "this run's are [18, 3]");
  EXPECT_FT_ERROR(StoredTables(dir.path().string(), "other.", kRows, kDim), "neither tables-*.safetensors nor");
}

TEST(TableShards, ACheckpointThatCannotServeTheRunIsRefused) {
  Generator gen = test_generator();
  Written w;
  write_two_shards(w, gen);
  const std::string folder = w.dir.path().string();
  EXPECT_FT_ERROR(StoredTables(folder, "tables.", {7, 11}, kDim), "this run has tables of rows 7,11");
  EXPECT_FT_ERROR(StoredTables(folder, "tables.", kRows, 4), "width 4");
  std::filesystem::remove(w.dir.path() / table_shard_file(1));
  EXPECT_FT_ERROR(StoredTables(folder, "tables.", kRows, kDim), "holds 1 of the 2 table files");
  const std::string rank0 = (w.dir.path() / table_shard_file(0)).string();
  EXPECT_FT_ERROR(load_safetensors_rows(rank0, "1.weight", 3, 3), "outside '1.weight' [5, 3]");
  EXPECT_FT_ERROR(load_safetensors_rows(rank0, "9.weight", 0, 1), "no tensor '9.weight'");
  EXPECT_EQ(load_safetensors_rows(rank0, "1.weight", 2, 3).to_vector(), w.table1.narrow(0, 2, 3).to_vector());
}

}  // namespace
}  // namespace ft
