// Where each embedding table of a model-parallel run lives (train/distributed/sharded_tables.h):
// - table-wise: the whole table on one rank (its owner);
// - row-wise: its rows split into one contiguous block per rank, rows / W each (the first
//   rows % W blocks one more);
// - replicated: every rank holds all of it, and the updates exchange every rank's bags (data
//   parallelism's way, DataParallel::bag_exchange).
// The planner (plan_sharding) places the tables from their sizes and the ranks' free memory;
// a plan can also be written out table by table.
//
// Letters: T tables, W ranks.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft {

enum class TableSharding : uint8_t { Replicated, TableWise, RowWise };

struct TablePlacement {
  TableSharding kind = TableSharding::Replicated;
  int owner = -1;  ///< TableWise: the rank holding the table
};

struct ShardingPlan {
  int world_size = 1;
  std::vector<TablePlacement> tables;  ///< [T]

  /// Rank `rank`'s row block of a row-wise table of `rows` rows: {first row, row count}.
  static std::pair<int64_t, int64_t> row_block(int64_t rows, int world_size, int rank);
  /// The rows of table t that `rank` holds (all, a block, or none).
  int64_t rows_held(int64_t table_rows, size_t t, int rank) const;
  /// Bytes of tables each rank holds at `bytes_per_row` (a row and its optimizer state): [W].
  std::vector<double> bytes_per_rank(const std::vector<int64_t>& table_rows, double bytes_per_row) const;
  /// The tables of one kind, in table order (TableWise: those `owner` holds; owner -1: all).
  std::vector<size_t> tables_of(TableSharding kind, int owner = -1) const;
  /// Whether every table is replicated (data parallelism alone).
  bool replicated() const;
  /// The plan in a few lines: each kind's tables, and each rank's table bytes.
  std::string describe(const std::vector<int64_t>& table_rows, double bytes_per_row) const;
};

struct ShardingInputs {
  std::vector<int64_t> table_rows;  ///< [T]
  double bytes_per_row = 0;         ///< a row's weight and optimizer state
  int world_size = 1;
  /// Bytes each rank may give its tables (the device's free memory less the rest of the run);
  /// 0: no limit.
  double budget_per_rank = 0;
};

/// A plan from `spec`:
/// - "auto": tables larger than a fair share (the total over W) are split row-wise, the rest
///   placed whole, largest first, each on the rank holding the fewest bytes (then the fewest
///   tables);
/// - "table": every table whole, placed as "auto" places them; "row": every table row-wise;
///   "replicated": every table on every rank;
/// - T comma-separated entries, one a table: a rank number (table-wise on it), "r" (row-wise) or
///   "d" (replicated).
/// A table with fewer rows than W cannot be row-wise ("auto" places it whole). A plan in which a
/// rank's tables exceed the budget is an ft::Error naming the rank, its bytes and the budget.
ShardingPlan plan_sharding(const std::string& spec, const ShardingInputs& inputs);

}  // namespace ft
