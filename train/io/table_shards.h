// Embedding tables in a checkpoint, stored by rows, so that a run with any placement of the
// tables (train/distributed/sharding_plan.h) reads what a run with any other wrote: the same
// world size or another, sharded or not.
//
// A sharded run's rank r writes `tables-<r>.safetensors`: for each table t it writes,
// "<t>.weight" f32 [rows, D] and, with Adagrad, "<t>.accumulator" f32 [rows], the rows
// [first, first + rows) of the table; the metadata holds "<t>.first_row", "table_rows" (every
// table's rows, comma-separated), "dim", "shard" (r) and "shards" (the file count). A run that
// holds every table in one EmbeddingBagCollection writes them stacked in model.safetensors, as
// `<prefix>weight` [R, D] and `<prefix>accumulator` [R]. StoredTables finds a table's rows in
// either, reading only those rows.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// Rows [first, first + weight.size(0)) of table `table`, as a rank writes them.
struct TableRows {
  size_t table = 0;
  int64_t first = 0;
  Tensor weight;       ///< [rows, D]
  Tensor accumulator;  ///< [rows], or undefined
};

/// The file name of rank `rank`'s rows.
std::string table_shard_file(int rank);

/// Writes `parts` to `path` (atomically) in the format above, for tables of `table_rows` rows
/// and width `dim`, as shard `shard` of `shards`.
void write_table_shard(const std::string& path, const std::vector<TableRows>& parts,
                       const std::vector<int64_t>& table_rows, int64_t dim, int shard, int shards);

class StoredTables {
 public:
  /// The tables a complete checkpoint folder holds: its tables-*.safetensors files, else the
  /// stacked `<prefix>weight` of its model.safetensors. Tables of other rows or width than
  /// `table_rows` and `dim`, a missing shard file, or neither form present is an ft::Error
  /// naming the folder.
  StoredTables(const std::string& folder, const std::string& prefix, std::vector<int64_t> table_rows, int64_t dim);
  /// Rows [first, first + count) of table t into `weight` [count, D] and, when defined,
  /// `accumulator` [count] (any device). Rows no stored piece holds, or an accumulator the
  /// checkpoint lacks, are an ft::Error.
  void read(size_t t, int64_t first, int64_t count, const Tensor& weight, const Tensor& accumulator) const;
  /// Whether a sharded run wrote them.
  bool sharded() const { return sharded_; }
  /// Whether every stored piece has its Adagrad accumulators.
  bool has_accumulators() const;
  /// Whether they are element-wise ([rows, D]) rather than row-wise ([rows]).
  bool elementwise_accumulators() const;
  /// The tables of a checkpoint written by a sharded run, as its shard files' metadata gives
  /// them ({table rows, dim}); nullopt when the folder holds no shard file.
  static std::optional<std::pair<std::vector<int64_t>, int64_t>> sharded_shape(const std::string& folder);

 private:
  struct Piece {
    std::string file;
    std::string weight_name, accumulator_name;  // accumulator_name empty: none stored
    int64_t first = 0, rows = 0;                // the table's rows it holds
    int64_t at = 0;                             // where they start in its tensor
    bool elementwise = false;                   // accumulators [rows, D] (element-wise), else [rows]
  };
  std::string folder_;
  std::vector<int64_t> table_rows_;
  int64_t dim_;
  bool sharded_ = false;
  std::vector<std::vector<Piece>> pieces_;  // [T]
};

}  // namespace ft
