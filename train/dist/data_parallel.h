// Data-parallel training on top of a Communicator: every rank holds the whole model, takes its
// slice of every batch (BatchSampler's BatchShard), and before each optimizer step the flat
// gradient buffers are averaged over the ranks, so that every rank applies the same update and
// the parameters stay bit-identical. Rank 0's parameters are broadcast once at the start.
//
// Not built yet (the rest of issue 17): buckets reduced while backward runs, ZeRO-1, the NCCL
// watchdog. The reduction here starts after the last micro-batch's backward, one all-reduce per
// flat buffer (one per gradient dtype), which is also what gradient accumulation needs: the
// micro-steps before the last reduce nothing.
#pragma once
#include "layers/module.h"
#include "optim/optimizer.h"
#include "train/dist/communicator.h"

namespace ft {

class DataParallel {
 public:
  struct Options {
    /// Before each reduction, check that every rank's master weights equal rank 0's bit for bit
    /// (they were updated identically in the step before); a difference is an ft::Error.
    bool check_replicas = false;
  };
  DataParallel(Communicator& comm, Optimizer& optimizer, Options options);
  /// Every rank takes rank 0's parameters, buffers and master weights (call before training, and
  /// after loading a checkpoint on rank 0 only).
  void broadcast_parameters(Module& model);
  /// Averages the gradients of the optimizer's parameters over the ranks (in place; waits).
  void average_gradients();
  /// Every rank's master weights equal rank 0's, bit for bit, or an ft::Error names the first
  /// element that differs.
  void check_replicas();
  Communicator& comm() { return comm_; }
  int rank() const { return comm_.rank(); }
  int world_size() const { return comm_.world_size(); }

 private:
  Communicator& comm_;
  Optimizer& optimizer_;
  Options options_;
};

}  // namespace ft
