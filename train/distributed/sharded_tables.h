// ShardedEmbeddingBags: a recommender's embedding tables spread over the ranks of a run (model
// parallelism), while the rest of the model stays data-parallel. Each table is placed by a
// ShardingPlan (train/distributed/sharding_plan.h): whole on one rank, split row-wise over all,
// or replicated. Every rank gives its own B samples' ids [B, T], one id a table (Criteo's
// one-hot features), and gets their pooled vectors [B, T, D], as EmbeddingBagCollection would
// give them; the tables train by the same sparse update inside backward, applied by the ranks
// that hold the rows.
//
// One step, W ranks:
// - table-wise: the ids go by all-to-all to each table's owner, which pools the W·B samples'
//   lookups of its tables in one embedding_bag call; the pooled vectors come back by all-to-all.
//   Backward: their gradients go to the owner by the reverse all-to-all, and the owner's
//   embedding_bag backward applies the update.
// - row-wise: the ids are all-gathered; each rank pools the W·B samples over its block of rows
//   (lookups of other blocks weigh 0: lib/ops/row_block/row_block.h), and a reduce-scatter
//   adds the partial sums into each rank's B samples. Backward: the gradients are all-gathered,
//   and each rank updates the rows of its block.
// - replicated: every rank holds the table, and its update exchanges every rank's bags
//   (set_exchange, as data parallelism does).
// The gradients that cross are scaled by 1 / W (each rank's loss is its own samples' mean), so
// W ranks with B samples each apply the updates one process with the W·B samples applies.
//
// start_one_hot leaves the last exchange (the pooled vectors' all-to-all, the reduce-scatter) in
// flight, so that the bottom MLP runs while it crosses. Every collective here is timed under the
// label kTablesExchange (Communicator::last_timing), apart from data parallelism's reduction.
//
// The counts of every exchange follow from the plan and B alone, so a step can be captured in a
// CUDA graph. Every rank must call forward_one_hot with the same B, in the same order.
//
// State: this rank's shard ("owned.weight": its whole tables, stacked; "row_blocks.weight": its
// block of each row-wise table; with Adagrad their "accumulator"s) is rank-local
// (Module::set_rank_local); the replicated tables ("replicated.*") are every rank's alike.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "layers/embedding_bag.h"
#include "layers/module.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "train/distributed/communicator.h"
#include "train/distributed/sharding_plan.h"
#include "train/io/table_shards.h"

namespace ft {

/// The timing label of the tables' exchange, forward and backward.
inline constexpr const char* kTablesExchange = "embedding tables' exchange";

class ShardedEmbeddingBags : public PooledTables {
 public:
  /// The tables `options` describes, placed by `plan`, as rank `rank` holds them: it builds and
  /// draws only its own rows, with the values EmbeddingBagCollection(options, gen) gives them,
  /// and leaves gen where that constructor leaves it. One id per bag (forward_one_hot only).
  ShardedEmbeddingBags(EmbeddingBagCollection::Options options, ShardingPlan plan, int rank, Generator& gen);
  /// The run's communicator (its world size the plan's), before the first forward.
  void set_communicator(Communicator* comm) { comm_ = comm; }
  /// The replicated tables' exchange (DataParallel::bag_exchange, or replicated_bag_exchange).
  void set_exchange(std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> exchange) override;

  /// ids i32/i64 [B, T], this rank's samples: [B, T, D] in out_dtype.
  Tensor forward_one_hot(const Tensor& ids, DType out_dtype) override;
  std::function<Tensor()> start_one_hot(const Tensor& ids, DType out_dtype) override;

  const EmbeddingTablesOptions& options() const override { return options_; }
  const ShardingPlan& plan() const { return plan_; }
  /// This rank's part of table t: {first row, rows} inside the table and where it sits in
  /// `weight_of(t)`: {first row there}; rows 0 when this rank holds none of table t.
  struct Held {
    int64_t first = 0, rows = 0, at = 0;
  };
  Held held(size_t t) const;
  /// The weight [rows, D] holding this rank's part of table t (owned, row_blocks or replicated);
  /// undefined when it holds none.
  Tensor weight_of(size_t t) const;
  /// The same for the Adagrad accumulator [rows].
  Tensor accumulator_of(size_t t) const;
  /// What this rank writes of the tables to a checkpoint (train/io/table_shards.h): its whole
  /// tables, its row blocks, and on rank 0 the replicated tables.
  std::vector<TableRows> rows_to_save() const;

 private:
  /// The sub-collection a kind of placement lives in (nullptr when this rank has none).
  EmbeddingBagCollection* collection_of(size_t t) const;
  /// The index tensors for batch size B on `device`, made on first use (in the eager steps
  /// before a capture) and kept: a captured step reads its own, which an evaluation batch of
  /// another size in between must not free.
  struct Indices {
    Tensor send_ids;      // TW: positions in ids [B·T] in send order (owner, sample, table)
    Tensor block_ids;     // RW: positions of the row-wise tables' ids, [B·T_rw]
    Tensor replica_ids;   // replicated: positions, [B·T_p]
    Tensor bag_offsets;   // RW: 0, 1, ..., W·B·T_rw
    RowPermutation assemble;  // [B·T]: each (sample, table)'s row in the joined pooled rows
  };
  const Indices& indices(int64_t batch, Device device);
  /// The pooled vectors of this rank's samples; the last exchange is left in `in_flight`.
  Tensor pooled_table_wise(const Tensor& ids, int64_t batch, DType out_dtype, std::unique_ptr<Work>* in_flight);
  Tensor pooled_row_wise(const Tensor& ids, int64_t batch, DType out_dtype, std::unique_ptr<Work>* in_flight);

  EmbeddingBagCollection::Options options_;
  ShardingPlan plan_;
  int rank_;
  Communicator* comm_ = nullptr;
  std::vector<size_t> row_wise_, replicated_;  // tables of each kind, in table order
  std::vector<std::vector<size_t>> owned_by_;  // [W]: the tables each rank holds whole
  std::shared_ptr<EmbeddingBagCollection> owned_, row_blocks_, replicas_;
  Tensor block_bounds_[3];  // RW on the weight's device: table rows, block begin, block rows, i64 [T_rw]
  Tensor nothing_owned_;    // a rank holding no whole table: an empty leaf its exchange's gradient reaches
  std::map<std::pair<int64_t, Device>, Indices> indices_;
};

/// Loads the rows `tables` holds (all of them, or this rank's shard) from a checkpoint's stored
/// tables, written by a run of any placement and world size.
void load_stored_tables(PooledTables& tables, const StoredTables& stored);

/// The exchange of replicated tables (SparseRowUpdate::exchange) over `comm`, one id per bag:
/// every rank's ids and bag gradients all-gathered, the gradients scaled by 1 / world size.
std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> replicated_bag_exchange(Communicator& comm);

}  // namespace ft
