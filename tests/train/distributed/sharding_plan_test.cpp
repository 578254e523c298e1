// The sharding planner: every table placed once, each rank's bytes adding up to the tables'
// (row-wise tables counted block by block), the large tables split and the rest balanced, the
// written plans read as written, and the plans that cannot work refused with their reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "tests/lib/test_util.h"
#include "train/distributed/sharding_plan.h"

namespace ft {
namespace {

// MLPerf DLRMv2's Criteo 1TB tables (ids capped at 40M).
const std::vector<int64_t> kCriteo1Tb = {39884406, 39043,    17289, 7420,     20263,    3,     7120, 1543,  63,
                                         38532951, 2953546,  403346, 10,      2208,     11938, 155,  4,     976,
                                         14,       39979771, 25641295, 39664984, 585935, 12972, 108,  36};

double total_bytes(const std::vector<int64_t>& rows, double per_row) {
  return std::accumulate(rows.begin(), rows.end(), 0.0) * per_row;
}

TEST(ShardingPlanTest, RowBlocksCoverTheTableOnce) {
  for (int64_t rows : {int64_t{4}, int64_t{5}, int64_t{7}, int64_t{1000003}})
    for (int world : {1, 2, 3, 4, 8}) {
      if (rows < world) continue;
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const auto [first, count] = ShardingPlan::row_block(rows, world, r);
        EXPECT_EQ(first, next) << rows << " rows, rank " << r << " of " << world;
        EXPECT_GE(count, rows / world);
        EXPECT_LE(count, rows / world + 1);
        next = first + count;
      }
      EXPECT_EQ(next, rows);
    }
}

TEST(ShardingPlanTest, AutoOnCriteo1TbBalancesFourRanks) {
  const double per_row = 128 * 8.0;  // f32 rows with element-wise Adagrad state
  const ShardingPlan plan = plan_sharding("auto", {.table_rows = kCriteo1Tb, .bytes_per_row = per_row, .world_size = 4});
  ASSERT_EQ(plan.tables.size(), kCriteo1Tb.size());
  const std::vector<double> bytes = plan.bytes_per_rank(kCriteo1Tb, per_row);
  EXPECT_NEAR(std::accumulate(bytes.begin(), bytes.end(), 0.0), total_bytes(kCriteo1Tb, per_row), 1.0);
  const double largest = 39979771 * per_row, fair = total_bytes(kCriteo1Tb, per_row) / 4;
  for (double b : bytes) EXPECT_LE(b, fair + largest);
  // Every rank holds one of the four ~40M-row tables.
  for (int r = 0; r < 4; ++r) EXPECT_GT(bytes[static_cast<size_t>(r)], 38e6 * per_row) << "rank " << r;
  EXPECT_NE(plan.describe(kCriteo1Tb, per_row).find("rank 3: tables"), std::string::npos);
}

TEST(ShardingPlanTest, AutoSplitsATableLargerThanAFairShare) {
  const std::vector<int64_t> rows = {1000, 10, 20, 30, 40};
  const ShardingPlan plan = plan_sharding("auto", {.table_rows = rows, .bytes_per_row = 4, .world_size = 2});
  EXPECT_EQ(plan.tables[0].kind, TableSharding::RowWise);
  for (size_t t = 1; t < rows.size(); ++t) EXPECT_EQ(plan.tables[t].kind, TableSharding::TableWise) << t;
  // The small tables: 40 and 10 on one rank, 30 and 20 on the other.
  const std::vector<double> bytes = plan.bytes_per_rank(rows, 4);
  EXPECT_EQ(bytes[0], bytes[1]);
  // One rank alone: nothing to split.
  const ShardingPlan one = plan_sharding("auto", {.table_rows = rows, .bytes_per_row = 4, .world_size = 1});
  for (const TablePlacement& p : one.tables) EXPECT_EQ(p.kind, TableSharding::TableWise);
}

TEST(ShardingPlanTest, WrittenPlansAndNamedOnes) {
  const std::vector<int64_t> rows = {10, 3, 40};
  const ShardingPlan plan = plan_sharding("r,d,1", {.table_rows = rows, .bytes_per_row = 1, .world_size = 2});
  EXPECT_EQ(plan.tables[0].kind, TableSharding::RowWise);
  EXPECT_EQ(plan.tables[1].kind, TableSharding::Replicated);
  EXPECT_EQ(plan.tables[2].kind, TableSharding::TableWise);
  EXPECT_EQ(plan.tables[2].owner, 1);
  EXPECT_EQ(plan.bytes_per_rank(rows, 1), (std::vector<double>{5 + 3, 5 + 3 + 40}));
  EXPECT_EQ(plan.rows_held(10, 0, 1), 5);
  EXPECT_EQ(plan.rows_held(40, 2, 0), 0);
  EXPECT_TRUE(plan_sharding("replicated", {.table_rows = rows, .bytes_per_row = 1, .world_size = 2}).replicated());
  const ShardingPlan whole = plan_sharding("table", {.table_rows = rows, .bytes_per_row = 1, .world_size = 2});
  EXPECT_EQ(whole.tables_of(TableSharding::TableWise).size(), 3u);
  EXPECT_FALSE(whole.replicated());
}

TEST(ShardingPlanTest, PlansThatCannotWorkAreRefused) {
  const std::vector<int64_t> rows = {10, 3, 40};
  const ShardingInputs two{.table_rows = rows, .bytes_per_row = 1, .world_size = 2};
  EXPECT_FT_ERROR(plan_sharding("r,d", two), "places 2 tables, the model has 3");
  EXPECT_FT_ERROR(plan_sharding("r,d,2", two), "outside the 2 ranks");
  EXPECT_FT_ERROR(plan_sharding("r,x,1", two), "table 1");
  EXPECT_FT_ERROR(plan_sharding("row", {.table_rows = rows, .bytes_per_row = 1, .world_size = 4}),
                  "table 1 has 3 rows, fewer than the 4 ranks");
  // 53 bytes of tables, 20 a rank: no whole placement fits the 40-row table.
  EXPECT_FT_ERROR(plan_sharding("table", {.table_rows = rows, .bytes_per_row = 1, .world_size = 2, .budget_per_rank = 20}),
                  "does not fit: rank");
  EXPECT_NO_THROW(plan_sharding("row", {.table_rows = rows, .bytes_per_row = 1, .world_size = 2, .budget_per_rank = 27}));
}

}  // namespace
}  // namespace ft
