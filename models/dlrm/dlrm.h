// DLRM (facebookresearch/dlrm): dense features → bottom MLP (Linear + ReLU on every layer);
// each categorical feature → its table's embedding bag; the bottom output and the T pooled
// vectors → the interaction → top MLP (Linear + ReLU, the last layer without) → one logit. The
// interaction is dlrm's dot (their pairwise dot products after the bottom output,
// lib/ops/dot_interaction/dot_interaction.h) or MLPerf DLRMv2's DCNv2 cross network over the
// T + 1 vectors joined (layers/cross_network.h).
// Letters: B samples, T tables of D columns; the bottom MLP ends at D.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "layers/cross_network.h"
#include "layers/embedding_bag.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "train/distributed/sharded_tables.h"

namespace ft {

class DLRM : public Module {
 public:
  enum class Interaction { Dot, Cross };
  struct Options {
    int64_t dense_features = 13;
    std::vector<int64_t> bottom = {};  ///< widths after the input; the last is D
    std::vector<int64_t> top = {};     ///< widths after the interaction; the last is 1
    EmbeddingBagCollection::Options tables = {};  ///< its dim must be D
    /// Model parallelism: the tables spread over the run's ranks by this plan, as rank `rank`
    /// holds them (ShardedEmbeddingBags: give it the communicator before training). Unset: this
    /// process holds every table.
    std::optional<ShardingPlan> sharding = {};
    int rank = 0;
    Interaction interaction = Interaction::Dot;
    int64_t cross_rank = 512;   ///< DCNv2's low rank (Cross)
    int64_t cross_layers = 3;   ///< DCNv2's layers (Cross)
  };
  /// Linear weights normal(0, √(2 / (in + out))) and biases normal(0, √(1 / out)), tables
  /// uniform in ±√(1 / rows): facebookresearch/dlrm's initialization, drawn from gen.
  DLRM(Options options, Generator& gen);
  /// dense [B, dense_features] (any floating dtype; cast to the model's), sparse ids i32/i64
  /// [B, T]: the logits [B].
  Tensor logits(const Tensor& dense, const Tensor& sparse_ids);
  /// Every parameter but the tables (which update themselves in backward): the optimizer's.
  std::vector<Tensor> dense_parameters() const;
  /// The width of the top MLP's input: D + (T + 1)·T / 2 (dot), (T + 1)·D (cross).
  int64_t interaction_width() const {
    return interaction_width(tables_->tables(), options_.tables.dim, options_.interaction);
  }
  /// The same for T tables of width D, before a model is built (a run's memory estimate).
  static int64_t interaction_width(int64_t tables, int64_t dim, Interaction interaction = Interaction::Dot) {
    return interaction == Interaction::Dot ? dim + (tables + 1) * tables / 2 : (tables + 1) * dim;
  }
  /// Model FLOPs per sample, forward and backward (2·MACs forward, twice that backward), of the
  /// MLPs and the interaction.
  double flops_per_sample() const;
  PooledTables& tables() { return *tables_; }
  /// The sharded tables, or nullptr when this process holds every table.
  ShardedEmbeddingBags* sharded_tables() { return dynamic_cast<ShardedEmbeddingBags*>(tables_.get()); }
  const Options& options() const { return options_; }

 private:
  Options options_;
  std::vector<std::shared_ptr<Linear>> bottom_, top_;
  std::shared_ptr<PooledTables> tables_;
  std::shared_ptr<CrossNetwork> cross_;  // the Cross interaction's
};

}  // namespace ft
