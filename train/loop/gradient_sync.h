// What the training loop needs from data parallelism, and all it knows of it: the step's
// gradient reduction around backward, the group's size and rank, the step brackets and the
// mean of a logged value over the ranks. DataParallel (train/distributed/data_parallel.h)
// implements it; the loop never names the concrete class.
#pragma once
#include <cstdint>

#include "lib/tensor.h"

namespace ft {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  /// Before the step's first forward, inside a captured step too: the step's collectives (a
  /// model-parallel layer's exchange in forward among them) are timed from here.
  virtual void before_forward() = 0;
  /// Before each micro-batch's backward; `last` for the step's last one (whose backward reduces).
  virtual void before_backward(bool last) = 0;
  /// After the last backward: what follows (the optimizer step) sees the reduced gradients.
  virtual void after_backward() = 0;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Bracket each step's enqueueing: `step` names the collectives in errors, and end_step lets
  /// the backend watch the step's end (a lost peer inside a replayed graph).
  virtual void begin_step(int64_t step) = 0;
  virtual void end_step() = 0;
  /// The mean over the ranks of each rank's `value` (a loss of its part of the data); every rank
  /// calls it and gets the same result.
  virtual double mean_over_ranks(double value) = 0;
  /// value = its mean over the ranks, in place, ordered like the step's kernels (inside a captured
  /// step too): the training step's loss, so that a logged line reads the global batch's loss
  /// without a collective of its own.
  virtual void average_over_ranks(const Tensor& value) = 0;
  /// Whether each rank holds only its shard of the optimizer state (ZeRO-1), so that every rank
  /// writes its part of a checkpoint, not rank 0 alone.
  virtual bool sharded() const = 0;
};

}  // namespace ft
