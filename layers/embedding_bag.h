// EmbeddingBagCollection: a recommender's categorical features, one table per feature, all
// stacked in one f32 weight and pooled by one table-batched embedding_bag call. The tables
// train by their own sparse update inside backward (row-wise SGD or row-wise Adagrad, lib/ops/
// embedding_bag.h), never through the dense optimizer: give an optimizer the model's other
// parameters (DLRM::dense_parameters).
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include "layers/module.h"
#include "lib/ops/embedding_bag/embedding_bag.h"

namespace ft {

class EmbeddingBagCollection : public Module {
 public:
  struct Options {
    std::vector<int64_t> table_rows = {};  ///< rows of each table, T of them
    int64_t dim = 0;                        ///< D, shared by every table
    BagMode mode = BagMode::Sum;
    RowUpdateKind update = RowUpdateKind::SGD;
    double lr = 0.01;   ///< the tables' learning rate (constant)
    double eps = 1e-8;  ///< row-wise Adagrad's
  };
  /// Table t uniform in ±√(1 / rows_t), as facebookresearch/dlrm initializes them, drawn from gen.
  /// Parameters: "weight" [R, D] f32 (trainable, kept f32 by Module::to) and, for Adagrad,
  /// "accumulator" [R] (frozen: state the update keeps, saved with the model like a buffer).
  EmbeddingBagCollection(Options options, Generator& gen);
  /// ids i32/i64 [B, T], one id per bag (Criteo's one-hot features): [B, T, D] in out_dtype.
  Tensor forward_one_hot(const Tensor& ids, DType out_dtype);
  /// Bags of any size: ids [N], offsets [B·T + 1] sample-major, optional per-sample weights [N].
  Tensor forward_bags(const Tensor& ids, const Tensor& offsets, const Tensor& per_sample_weights, DType out_dtype);
  int64_t tables() const { return static_cast<int64_t>(options_.table_rows.size()); }
  int64_t dim() const { return options_.dim; }
  const Tensor& weight() const { return weight_; }
  const Options& options() const { return options_; }
  /// Data parallelism: the tables' update exchanges every rank's bags and gradients first
  /// (SparseRowUpdate::exchange), so that the replicas stay identical.
  void set_exchange(std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> exchange) {
    exchange_ = std::move(exchange);
  }

 private:
  /// The update the next backward applies; its lr lives on the weight's device.
  SparseRowUpdate update();

  Options options_;
  Tensor weight_, accumulator_, row_offsets_, lr_;
  Tensor one_hot_offsets_;  // 0, 1, ..., B·T for the last batch shape: made once, not every step
  std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> exchange_;  // set_exchange's
};

}  // namespace ft
