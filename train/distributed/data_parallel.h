// Data-parallel training on top of a Communicator: every rank holds the whole model and takes its
// slice of every batch (BatchSampler's BatchShard); the gradients are averaged over the ranks
// while backward runs, so that every rank applies the same update and the parameters stay
// bit-identical. Rank 0's parameters and optimizer state are broadcast once at the start.
//
// Buckets. The flat gradient buffers are cut into buckets (Optimizer::buckets(), about 25 MB,
// in the order backward completes them: from the end of each buffer). A gradient-ready hook on
// every parameter counts down the bucket's members; when a bucket is complete, and every bucket
// before it has started, its reduction starts (on NCCL's communication stream, or Gloo's worker
// thread) while backward goes on. After backward the buckets the backward did not complete
// (parameters it did not reach: their gradients are zero) start, and the optimizer step is
// ordered after all of them. Only the last micro-batch's backward reduces: the micro-steps of
// gradient accumulation before it reduce nothing.
//
// ZeRO-1 (an optimizer built with DataPartition::shard_state): each bucket is reduce-scattered
// instead of all-reduced, so a rank receives the average of its chunk only; the optimizer updates
// that chunk and gathers the parameters (DataParallel gives it the collectives).
//
// ZeRO-2 (DataPartition::shard_grads): there is no flat gradient buffer. Backward leaves each
// parameter a gradient of its own; when it is complete it is copied into its bucket's staging
// slot (two a group, each the size of the largest bucket, used in turn) and released, and the
// bucket is reduce-scattered from the slot into the store's gradient shards. A slot is taken
// over by the bucket after next once the collective that read it is done (the compute stream
// waits for it); a gradient completed before its bucket's slot is free waits, unreleased, until
// its bucket starts. The local gradients of earlier micro-batches accumulate in the parameters'
// own gradients, as without ZeRO.
//
// ZeRO-3 (DataPartition::shard_params): the parameters too; each layer's are gathered around its
// forward and backward by a ParameterGather (train/distributed/parameter_gather.h), which the
// model calls (CausalLM::set_layer_gather(layer_gather())).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/module.h"
#include "optim/optimizer.h"
#include "train/distributed/communicator.h"
#include "train/distributed/parameter_gather.h"
#include "train/loop/gradient_sync.h"

namespace ft {

/// Every rank takes rank 0's values of the model's replicated tensors (Module::replicated_state_dict:
/// parameters, frozen ones, buffers), except ZeRO-3's layer parameters, which exist only as each
/// rank's shard (lent storage): a ZeRO-3 run calls it before building its optimizer, while the
/// model is whole.
void broadcast_model(Communicator& comm, const Module& model);

class DataParallel : public GradientSync, public ShardCollectives {
 public:
  struct Options {
    /// Before each step's reduction, check that every rank's weights equal rank 0's bit for bit
    /// (they were updated identically in the step before); a difference is an ft::Error.
    bool check_replicas = false;
    /// Record the order in which gradients became ready and buckets started (trace()).
    bool trace = false;
    /// The dtype gradients cross the wire in: their own (f32), or BF16, which halves the bytes
    /// (each rank's gradients rounded to bf16, reduced in bf16, widened back), as llm.c does.
    std::optional<DType> reduce_dtype = {};
  };
  /// The optimizer must have been built with this run's DataPartition (rank, world size); it is
  /// used until the last step, and not in the destructor.
  DataParallel(Communicator& comm, Optimizer& optimizer, Options options);
  /// Clears every gradient-ready hook of the optimizer's parameters (hooks have no handles).
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// Every rank takes rank 0's parameters, buffers and optimizer state (call before training,
  /// after loading any checkpoint). Rank-local modules (Module::set_rank_local: a rank's shard of
  /// sharded tables) keep their own.
  void broadcast_parameters(Module& model);
  /// Every rank's weights (the optimizer's, and after broadcast_parameters every tensor of the
  /// model's replicated state dict: tables trained outside the optimizer, buffers) equal rank 0's, bit for
  /// bit, or an ft::Error names the first element that differs. (ZeRO-3: what the ranks hold
  /// whole, the parameters outside the layers and the buffers.)
  void check_replicas();
  /// The tables' exchange for data parallelism with one id per bag (SparseRowUpdate::exchange):
  /// replicated_bag_exchange over this run's communicator (train/distributed/sharded_tables.h).
  std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> bag_exchange();
  // GradientSync: the step's reduction, and what the loop asks of the group.
  void before_forward() override;
  void before_backward(bool last) override;
  void after_backward() override;
  int rank() const override { return comm_.rank(); }
  int world_size() const override { return comm_.world_size(); }
  void begin_step(int64_t step) override { comm_.set_step(step); }
  void end_step() override;
  /// Through a collective on the training device.
  double mean_over_ranks(double value) override;
  void average_over_ranks(const Tensor& value) override;
  bool sharded() const override { return optimizer_.sharded(); }
  // ShardCollectives: what the ZeRO-1 step needs.
  void sum(const Tensor& t) override;
  void gather(const Tensor& chunk, const Tensor& whole) override;

  Communicator& comm() { return comm_; }
  /// ZeRO-3: what the model calls around its layers (CausalLM::set_layer_gather); null otherwise.
  LayerGather* layer_gather() { return gather_.get(); }
  /// With Options::trace: the last reducing backward's events in order: "ready <param>" when a
  /// parameter's gradient is complete, "start <bucket>" when a bucket's reduction starts,
  /// "backward done" when backward has returned.
  const std::vector<std::string>& trace() const { return trace_; }

 private:
  void parameter_ready(size_t param);
  /// Starts every bucket from the next one up to (not including) `end`, in order.
  void start_buckets(size_t end);
  /// ZeRO-2: the staging slots (and their wire copies), and which slot each bucket uses.
  void make_staging();
  /// ZeRO-2: bucket b's part of its slot (its size, from the start).
  Tensor staging(size_t b) const;
  /// ZeRO-2: the bucket's collective, from its staging slot into the gradient shards.
  std::unique_ptr<Work> reduce_staged(size_t bucket);
  /// ZeRO-2: takes bucket b's staging slot (zeroed) if the bucket that used it before is
  /// started, and copies the gradients waiting for it; false when the slot is still in use.
  bool take_slot(size_t b);
  /// ZeRO-2: parameter p's part of bucket b into b's slot; releases p's gradient after its last part.
  void stage(size_t p, size_t b);
  void note(std::string event);

  Communicator& comm_;
  Optimizer& optimizer_;
  Options options_;
  std::vector<Tensor> hooked_;                   // the parameters whose gradient-ready hooks call back
  std::vector<uint64_t> hook_ids_;               // those hooks, one a parameter
  std::vector<std::vector<size_t>> buckets_of_;  // parameter → the buckets it has elements in
  std::vector<size_t> waiting_;                  // bucket → members whose gradient is not ready
  size_t next_bucket_ = 0;                       // buckets before it have started this step
  bool armed_ = false;                           // inside the last micro-batch's backward
  std::vector<std::unique_ptr<Work>> pending_;
  std::vector<std::string> trace_;
  std::vector<Tensor> wire_;  // per gradient group, with a reduce_dtype of its own: the narrow copies sent
  // ZeRO-2's staging: per group two slots (and their narrow wire copies); per bucket its slot this
  // step, the gradients waiting for it, and its collective (in pending_).
  static constexpr int kSlots = 2;
  std::vector<std::vector<Tensor>> slots_, slot_wires_;
  std::vector<int> slot_index_;                   // bucket → its group's slot (alternating)
  std::vector<bool> slot_taken_;                  // bucket → it holds its slot this step
  std::vector<int64_t> previous_on_slot_;         // bucket → the bucket before it on its slot (-1: none)
  std::vector<std::vector<size_t>> waiting_copies_;  // bucket → parameters ready before its slot
  std::vector<size_t> parts_left_;                // parameter → buckets its gradient is still to reach
  std::vector<bool> reached_;                     // parameter → its ready hook ran in this backward
  std::vector<Work*> bucket_work_;
  Module* model_ = nullptr;  // broadcast_parameters' model, which check_replicas compares too
  std::unique_ptr<ParameterGather> gather_;  // ZeRO-3 only
};

}  // namespace ft
