// Seeded shuffling and mini-batches of an in-memory dataset (rows of [N, ...] tensors), and the
// batch source that yields them epoch after epoch.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/tensor.h"
#include "train/data/batch_source.h"

namespace ft {

/// Which part of every batch this process takes in a data-parallel run.
struct BatchShard {
  int rank = 0, world = 1;
};

/// Batches of one epoch in a seeded order. In a data-parallel run every rank draws the same
/// permutation and batch b of the run is world · batch_size rows, of which rank r takes the r-th
/// slice of batch_size: N ranks see exactly the batches one process would with N times the batch.
class BatchSampler {
 public:
  /// drop_last skips a final partial batch (fixed shapes for timing and graphs).
  BatchSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool shuffle = true, bool drop_last = true,
               BatchShard shard = {});
  /// Starts epoch `epoch`: a new permutation derived from (seed, epoch).
  void start_epoch(int64_t epoch);
  int64_t batches_per_epoch() const;
  int64_t dataset_size() const { return size_; }
  /// This rank's row ids of batch b of the current epoch, i64 [batch] (fewer in a last partial
  /// batch; none when the rows run out before this rank's slice).
  Tensor batch_ids(int64_t b) const;

 private:
  int64_t size_, batch_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  BatchShard shard_;
  std::vector<int64_t> order_;
};

/// A sampler's batches, epoch after epoch: which batch comes next, and the position
/// {"epoch", "batch"} that names it. The batch sources over rows (RowBatchSource,
/// CriteoBatchSource) keep their place with it.
class EpochBatches {
 public:
  explicit EpochBatches(BatchSampler sampler);
  /// Row ids of the next batch; after an epoch's last batch, the next epoch starts with the
  /// sampler's next permutation.
  Tensor next_ids();
  DataPosition position() const;
  /// Moves to a position that position() returned; `source` names the caller in errors.
  void set_position(const DataPosition& position, const char* source);
  const BatchSampler& sampler() const { return sampler_; }
  int64_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }

 private:
  BatchSampler sampler_;
  int64_t epoch_ = 0, batch_ = 0;  // the next batch
};

/// Rows `ids` of `data` ([N, ...] on the CPU), moved to `device`.
Tensor take_rows(const Tensor& data, const Tensor& ids, Device device);

/// The same rows of several named [N, ...] host tensors (Fashion-MNIST's "images" and "labels"),
/// batch after batch in the sampler's order; after the last batch of an epoch the next epoch
/// starts with a new permutation. Its position is {"epoch", "batch"}.
class RowBatchSource : public WritingBatchSource {
 public:
  /// Every column holds the dataset's N rows on the CPU; the sampler must be over N rows.
  RowBatchSource(std::map<std::string, Tensor> columns, BatchSampler sampler);
  /// Gathers the batch's rows straight into `out`'s buffers, on several threads when the batch
  /// is large (one thread gathering a large batch is slower than the step it feeds).
  void next_into(BatchWriter& out) override;
  DataPosition position() const override;
  void set_position(const DataPosition& position) override;
  int64_t batches_per_epoch() const { return batches_.batches_per_epoch(); }

 private:
  std::map<std::string, Tensor> columns_;
  EpochBatches batches_;
};

}  // namespace ft
