// EmbeddingBagCollection: a recommender's categorical features, one table per feature, all
// stacked in one f32 weight and pooled by one table-batched embedding_bag call. The tables
// train by their own sparse update inside backward (row-wise SGD, or row-wise or element-wise Adagrad, lib/ops/
// embedding_bag.h), never through the dense optimizer: give an optimizer the model's other
// parameters (DLRM::dense_parameters).
#pragma once
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "layers/module.h"
#include "lib/ops/embedding_bag/embedding_bag.h"

namespace ft {

/// A recommender's tables: how many, their rows and width, pooling and sparse update.
struct EmbeddingTablesOptions {
  std::vector<int64_t> table_rows = {};  ///< rows of each table, T of them
  int64_t dim = 0;                        ///< D, shared by every table
  BagMode mode = BagMode::Sum;
  RowUpdateKind update = RowUpdateKind::SGD;
  double lr = 0.01;   ///< the tables' learning rate (constant)
  double eps = 1e-8;  ///< row-wise Adagrad's
  /// Where the tables are drawn and kept. A GPU's tables never pass through host memory: the
  /// Criteo 1TB tables with their Adagrad state are 192 GB, more than a host of 2 GPUs holds for
  /// its two processes.
  Device device = kCPU;
};

/// Rows [first, first + count) of a table of `rows` rows, whose draw starts at generator offset
/// `offset` (EmbeddingBagCollection::initial_rows draws them).
struct TableRowsToDraw {
  int64_t rows = 0, first = 0, count = 0;
  uint64_t offset = 0;
};

/// What a recommender model asks of its tables, whether one process holds them all
/// (EmbeddingBagCollection) or they are spread over the ranks of a run
/// (train/distributed/sharded_tables.h).
class PooledTables : public Module {
 public:
  /// ids i32/i64 [B, T], one id per bag (Criteo's one-hot features): [B, T, D] in out_dtype.
  virtual Tensor forward_one_hot(const Tensor& ids, DType out_dtype) = 0;
  /// forward_one_hot in two parts, so that a model's other work overlaps the exchange of tables
  /// spread over ranks: this enqueues the lookup and starts the exchange, and the function it
  /// returns, called once the other work is enqueued, gives the [B, T, D]. Tables a process
  /// holds whole are done at once.
  virtual std::function<Tensor()> start_one_hot(const Tensor& ids, DType out_dtype) {
    return [pooled = forward_one_hot(ids, out_dtype)] { return pooled; };
  }
  virtual const EmbeddingTablesOptions& options() const = 0;
  /// Data parallelism: the update of the tables every rank holds exchanges every rank's bags
  /// and gradients first (SparseRowUpdate::exchange), so that the replicas stay identical.
  virtual void set_exchange(std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> exchange) = 0;
  int64_t tables() const { return static_cast<int64_t>(options().table_rows.size()); }
  int64_t dim() const { return options().dim; }
};

class EmbeddingBagCollection : public PooledTables {
 public:
  using Options = EmbeddingTablesOptions;
  /// Table t uniform in ±√(1 / rows_t), as facebookresearch/dlrm initializes them, drawn from gen.
  /// Parameters: "weight" [R, D] f32 (trainable, kept f32 by Module::to) and, for Adagrad,
  /// "accumulator" [R] (row-wise) or [R, D] (element-wise) (frozen: state the update keeps,
  /// saved with the model like a buffer).
  EmbeddingBagCollection(Options options, Generator& gen);
  /// The same tables starting from `weight` [R, D] f32 (R the tables' rows): a rank's shard of
  /// sharded tables, drawn by initial_rows.
  EmbeddingBagCollection(Options options, Tensor weight);
  /// Rows [begin, begin + count) of a table of `rows` rows as the first constructor draws it,
  /// when the generator stood at `offset` before the table: f32 [count, D]. Any rows of any
  /// table can be drawn alone, so each rank of sharded tables draws only its own.
  static Tensor initial_rows(int64_t rows, int64_t dim, uint64_t seed, uint64_t offset, int64_t begin, int64_t count,
                             Device device = kCPU);
  /// The pieces' rows stacked in one f32 [Σ count, D] on `device`, drawn as initial_rows draws
  /// them `chunk_elements` at a time (64 MB of f32), so nothing the size of a table is made twice.
  static Tensor draw_rows(const std::vector<TableRowsToDraw>& pieces, int64_t dim, uint64_t seed, Device device,
                          int64_t chunk_elements = int64_t{16} << 20);
  Tensor forward_one_hot(const Tensor& ids, DType out_dtype) override;
  /// Bags of any size: ids [N], offsets [B·T + 1] sample-major, optional per-sample weights [N].
  Tensor forward_bags(const Tensor& ids, const Tensor& offsets, const Tensor& per_sample_weights, DType out_dtype);
  const Tensor& weight() const { return weight_; }
  /// The Adagrad accumulators ([R] or [R, D]); undefined under SGD.
  const Tensor& accumulator() const { return accumulator_; }
  const Options& options() const override { return options_; }
  void set_exchange(std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> exchange) override {
    exchange_ = std::move(exchange);
  }

 private:
  /// The update the next backward applies; its lr lives on the weight's device.
  SparseRowUpdate update();

  Options options_;
  Tensor weight_, accumulator_, row_offsets_, lr_;
  // 0, 1, ..., B·T for each batch shape seen (training's and evaluation's), made once and kept:
  // a captured step reads its own, which an evaluation batch in between must not free.
  std::map<std::pair<int64_t, Device>, Tensor> one_hot_offsets_;
  std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> exchange_;  // set_exchange's
};

}  // namespace ft
