// Optimizer interface: owns the gradients and per-parameter state of the trainable parameters,
// and updates the parameters from their gradients.
//
// Storage is flat (lib/flat_layout.h): the gradients are a GradBuffer (one f32 buffer per dtype
// on CUDA, each parameter's .grad() a view of it), and the master weights and every optimizer
// moment are buffers of the same layout, so one element offset names one parameter element in
// all of them and a contiguous range is a shard. A parameter stored in its master dtype (f32, or
// f64) lives in the master buffer itself: its storage becomes a view of it (tensor identity is
// kept); a bf16 parameter keeps its own storage, written from its f32 master after each update.
// Frozen parameters (requires_grad false) are left out: no gradient, no state. Build the
// optimizer after freezing and after Module::to, which replace what it points at.
//
// Every step begins the same way, on the device and without a host read: the global gradient
// norm (when clipping or non-finite skipping needs it), the clip factor, and whether this step
// is applied or skipped. Those values, the learning rate and the step counts live in a
// StepState of one-element device tensors that the update kernels read, so a step can be
// captured in a CUDA graph and replayed while the schedule changes the learning rate.
//
// KernelMode is read once per op: the norm and the update each run as one multi-tensor fused
// kernel chain (optim/multi_tensor.h) or as their per-tensor primitive twins.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lib/grad_buffer.h"
#include "lib/runtime.h"
#include "lib/tensor.h"

namespace ft {

/// What a step does before its update.
struct StepPolicy {
  /// > 0: scale the gradients by min(1, max_grad_norm / (norm + 1e-6)), inside the update.
  double max_grad_norm = 0.0;
  /// A NaN or infinite gradient norm skips the whole step on the device (parameters and
  /// optimizer state untouched) and counts it in skipped_steps().
  bool skip_nonfinite = true;
};

/// Per-step scalars in device memory, each a one-element tensor in the state dtype (f32, or
/// f64 when a parameter is f64) on the parameters' device. Counts are exact up to 2^24 in f32.
struct StepState {
  Tensor lr = {};         // written by set_lr, read by the update
  Tensor applied = {};    // steps applied so far; Adam's bias correction counts these
  Tensor skipped = {};    // steps skipped for a non-finite gradient norm
  Tensor grad_norm = {};  // the last computed global gradient norm, before clipping
  Tensor keep = {};       // this step: 1 to apply it, 0 to skip it
  Tensor clip = {};       // this step: the factor the update scales gradients by
};

/// How a data-parallel run divides the optimizer's flat buffers (train/distributed/data_parallel.h). The
/// buffers of every rank get the same layout, padded so that each bucket splits into `world`
/// equal chunks; with `shard_state` (ZeRO-1) a rank keeps the master weights and moments of its
/// chunk of every bucket only, updates that chunk, and the step ends by gathering the updated
/// parameters from every rank.
struct DataPartition {
  int rank = 0;
  int world = 1;
  /// The size of a gradient bucket (the unit of reduction, and of ZeRO-1's shards), in bytes of
  /// gradient; each is rounded down to a multiple of FlatLayout::kAlign · world elements.
  int64_t bucket_bytes = int64_t{25} << 20;
  bool shard_state = false;
};

/// The collectives a sharded (ZeRO-1) step runs, given by the data-parallel layer. Both are
/// ordered like the step's kernels (stream order on CUDA, done on return on the CPU).
class ShardCollectives {
 public:
  virtual ~ShardCollectives() = default;
  /// t = the sum of every rank's t, in place.
  virtual void sum(const Tensor& t) = 0;
  /// whole = every rank's chunk of it in rank order; `chunk` is this rank's part of `whole`.
  virtual void gather(const Tensor& chunk, const Tensor& whole) = 0;
};

class Optimizer {
 public:
  /// Takes the trainable parameters among `params` (frozen ones are skipped; at least one must
  /// be trainable), attaches their gradient views and allocates the master weights.
  Optimizer(std::vector<Tensor> params, double lr, StepPolicy policy, DataPartition partition = {});
  virtual ~Optimizer() = default;
  /// Applies one update from the gradients accumulated since zero_grad(). Reads nothing back
  /// from the device.
  void step();
  /// Every gradient = 0 (GradBuffer::zero: logically, with no kernel; the next backward
  /// overwrites each view, and step() zeroes any view it did not reach).
  void zero_grad();
  /// The flat gradient storage: its layout is also the layout of every state buffer.
  const GradBuffer& grad_buffer() const { return grads_; }
  double lr() const { return lr_; }
  /// Sets the learning rate of the next step (a device write, enqueued; call it outside a
  /// captured region so that each replay reads the value current at its launch).
  void set_lr(double lr);
  /// Records `lr` like set_lr, but returns its device write instead of enqueuing it, for a caller
  /// that does the write itself (GraphedStep, inside the replayed graph).
  DeviceWrites::Scalar set_lr_deferred(double lr);
  /// Steps taken (applied or skipped); learning-rate schedules follow it.
  int64_t step_count() const { return step_count_; }
  /// For resuming: the steps already taken, all of them applied unless set_skipped_steps says.
  void set_step_count(int64_t steps);
  /// Reads the device counters (synchronizes).
  int64_t applied_steps() const;
  int64_t skipped_steps() const;
  void set_skipped_steps(int64_t skipped);
  /// The global gradient norm of the last step, before clipping, as a device tensor [] (a view
  /// of the step state, which the next step overwrites: read or clone it before then);
  /// undefined when the policy needed no norm.
  Tensor last_grad_norm() const { return norm_computed_ ? state_.grad_norm.reshape({}) : Tensor(); }
  const StepPolicy& policy() const { return policy_; }
  const StepState& step_state() const { return state_; }
  /// The trainable parameters it updates, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  const DataPartition& partition() const { return partition_; }
  /// The gradient buckets of the partition, in the order backward completes them.
  const std::vector<FlatLayout::Bucket>& buckets() const { return buckets_; }
  /// ZeRO-1 (at world size 1 too: the whole path, each chunk being the whole bucket).
  bool sharded() const { return partition_.shard_state; }
  /// A sharded optimizer's collectives (DataParallel sets them; they must outlive the steps that
  /// use them); a sharded step without them is an ft::Error.
  void set_shard_collectives(ShardCollectives* collectives) { collectives_ = collectives; }
  /// Bytes of optimizer state this rank holds: the f32 master weights it keeps beside the
  /// parameters, and the moments (sharded: its chunks only).
  int64_t state_bytes() const;
  /// The buffers that hold every parameter's value, one per gradient group: the master weights
  /// (unsharded), or the parameters themselves (sharded: what the step gathers). Replicas of a
  /// data-parallel run hold them bit for bit alike.
  const std::vector<Tensor>& replica_buffers() const { return sharded() ? gather_flats_ : master_flats_; }
  /// The optimizer state as named tensors, for checkpoints: "<i>.master" and "<i>.<moment>" for
  /// parameter i (AdamW's "m" and "v", SGD's "momentum"), and the "applied" and "skipped" step
  /// counts; sharded, the whole state gathered from every rank (a collective: every rank calls
  /// it). load_state restores it, and a sharded optimizer takes its chunks (so a run resumes on
  /// any world size): shapes must match and every per-parameter name must be present; counts
  /// missing from older files are taken from set_step_count (call it first).
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 protected:
  /// What the update covers: a parameter, or (sharded) the part of one in a chunk this rank
  /// owns. Unsharded, the views have the parameter's shape; sharded they are 1-D.
  struct Piece {
    size_t param = 0;           // index into params_
    int64_t param_offset = 0;   // its first element's index within the parameter
    Tensor grad;       // its gradient (reduced over the ranks by then)
    Tensor value;      // what the update writes: the parameter (bf16 or its own f32 master)
    Tensor master;     // f32 master of a bf16 parameter; undefined when `value` is the master
    size_t group = 0;
    int64_t state_offset = 0;  // where its state starts in allocate_state()'s buffer of its group
  };
  /// The update of every piece, reading state_ (lr, applied, keep, clip).
  virtual void update() = 0;
  /// The optimizer's state buffers beyond the master weights, by name ("m", "v", "momentum"),
  /// each from allocate_state(), for state() and load_state().
  virtual std::vector<std::pair<std::string, const std::vector<Tensor>*>> state_buffers() const = 0;
  /// A zeroed state buffer per gradient group, in the gradients' dtype (f32, or f64), for moments:
  /// the group's size, or sharded the size of this rank's chunks.
  std::vector<Tensor> allocate_state() const;
  const std::vector<Piece>& pieces() const { return pieces_; }
  /// Piece k's view of one of allocate_state()'s buffers (shaped like the piece's `value`).
  Tensor state_piece(const std::vector<Tensor>& flats, size_t k) const;
  /// The dtype of the optimizer's state: f64 when any parameter is f64, else f32.
  DType state_dtype() const { return state_.lr.dtype(); }
  /// The update's dispatch: fused mode, and the fused kernels take every piece's gradient, value
  /// and master.
  bool fused_update() const;
  /// A step-state scalar in the dtype of a master (the twins' arithmetic).
  static Tensor scalar_as(const Tensor& scalar, DType dtype);
  /// The twins' skip: a [1] mask, true when this step is applied; undefined without the
  /// non-finite check (then every step is applied).
  Tensor keep_mask(DType dtype) const;
  /// slot = updated, or slot unchanged (bit for bit) when `keep` says the step is skipped.
  static void store_unless_skipped(const Tensor& slot, const Tensor& updated, const Tensor& keep);

  std::vector<Tensor> params_;
  StepPolicy policy_;
  DataPartition partition_;
  StepState state_;
  GradBuffer grads_;

 private:
  void make_pieces();
  /// The collectives, or an ft::Error saying that the optimizer `what` (needs them) without any.
  ShardCollectives& collectives(const char* what) const;
  /// Every bucket's chunks of `whole` (a buffer per group; undefined: skipped) gathered from
  /// every rank, in place.
  void gather_chunks(const std::vector<Tensor>& whole, const char* what) const;
  /// Sharded: whole-group buffers gathered from every rank's chunks of `flats` (state buffers).
  std::vector<Tensor> gathered(const std::vector<Tensor>& flats) const;
  /// Sharded: every rank's updated chunk of the parameters, gathered into every rank's buffers.
  void gather_parameters();
  /// Copies a whole-parameter value (checkpoint) into parameter i's pieces of `flats`.
  void scatter_into(const std::vector<Tensor>& flats, size_t i, const Tensor& value) const;

  std::vector<FlatLayout::Bucket> buckets_;
  std::vector<Piece> pieces_;
  // The master weights: whole groups unsharded, this rank's chunks sharded (an f32 parameter's
  // group stays whole: the parameters live in it). Sharded, gather_flats_ holds the parameters
  // of each group, which the step gathers: the f32 master group, or a bf16 copy of the layout.
  std::vector<Tensor> master_flats_, gather_flats_;
  std::vector<bool> group_owns_master_;
  ShardCollectives* collectives_ = nullptr;
  double lr_;
  int64_t step_count_ = 0;
  bool norm_computed_ = false;
};

/// Global L2 norm of all parameters' gradients (f32 accumulation), as a [] tensor; no sync.
Tensor grad_norm(const std::vector<Tensor>& params);

/// Scales every gradient by min(1, max_norm / (norm + 1e-6)) where norm is their global L2
/// norm, without reading the device (the factor stays a device tensor); returns the norm before
/// clipping. (Optimizers clip inside their update instead: StepPolicy::max_grad_norm.)
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace ft
