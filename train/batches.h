// Seeded shuffling and mini-batches of an in-memory dataset (rows of a [N, ...] tensor).
#pragma once
#include <cstdint>
#include <vector>

#include "lib/tensor.h"

namespace ft {

class BatchSampler {
 public:
  /// drop_last skips a final partial batch (fixed shapes for timing and graphs).
  BatchSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool shuffle = true, bool drop_last = true);
  /// Starts epoch `epoch`: a new permutation derived from (seed, epoch).
  void start_epoch(int64_t epoch);
  int64_t batches_per_epoch() const;
  /// Row ids of batch b of the current epoch, i64 [batch].
  Tensor batch_ids(int64_t b) const;

 private:
  int64_t size_, batch_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  std::vector<int64_t> order_;
};

/// Rows `ids` of `data` ([N, ...] on the CPU), moved to `device`.
Tensor take_rows(const Tensor& data, const Tensor& ids, Device device);

}  // namespace ft
