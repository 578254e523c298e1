// Optimizer interface: updates the trainable parameters from their gradients, keeping its
// moments in buffers of the ParameterStore's flat layout (optim/parameter_store.h), which holds
// the gradients, the master weights and the bucket plan and which data parallelism shares.
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

#include "lib/runtime.h"
#include "lib/tensor.h"
#include "optim/parameter_store.h"

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
  Tensor skip_run = {};   // steps skipped in a row, up to the last one (0 after an applied step)
  Tensor grad_norm = {};  // the last computed global gradient norm, before clipping
  Tensor keep = {};       // this step: 1 to apply it, 0 to skip it
  Tensor clip = {};       // this step: the factor the update scales gradients by
};

class Optimizer {
 public:
  /// Takes the trainable parameters among `params` (frozen ones are skipped; at least one must
  /// be trainable) into its ParameterStore, laid out for `partition`.
  Optimizer(std::vector<Tensor> params, double lr, StepPolicy policy, DataPartition partition = {});
  virtual ~Optimizer() = default;
  /// Applies one update from the gradients accumulated since zero_grad(). Reads nothing back
  /// from the device.
  void step();
  /// Every gradient = 0 (GradBuffer::zero: logically, with no kernel; the next backward
  /// overwrites each view, and step() zeroes any view it did not reach).
  void zero_grad();
  /// The gradients, masters and bucket plan (data parallelism reduces and gathers through it).
  ParameterStore& store() { return store_; }
  const ParameterStore& store() const { return store_; }
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
  const std::vector<Tensor>& params() const { return store_.params(); }
  /// ZeRO-1: this rank keeps and updates its chunk of every bucket (ParameterStore::sharded).
  bool sharded() const { return store_.sharded(); }
  /// Bytes of optimizer state this rank holds: the f32 master weights it keeps beside the
  /// parameters, and the moments (sharded: its chunks only).
  int64_t state_bytes() const;
  /// The optimizer state as named tensors, for checkpoints: "<i>.master" and "<i>.<moment>" for
  /// parameter i (AdamW's "m" and "v", SGD's "momentum"), and the "applied" and "skipped" step
  /// counts; sharded, the whole state gathered from every rank (a collective: every rank calls
  /// it) into host memory, one buffer at a time through the device. load_state restores it, and
  /// a sharded optimizer takes its chunks (so a run resumes on any world size): shapes must match
  /// and every per-parameter name must be present; counts missing from older files are taken
  /// from set_step_count (call it first).
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);
  /// state()'s "applied" and "skipped" alone: the optimizer's own one-element buffers.
  std::map<std::string, Tensor> step_counts() const { return {{"applied", state_.applied}, {"skipped", state_.skipped}}; }

 protected:
  using Piece = ParameterStore::Piece;
  /// The update of every piece, reading state_ (lr, applied, keep, clip).
  virtual void update() = 0;
  /// The optimizer's state buffers beyond the master weights, by name ("m", "v", "momentum"),
  /// each from allocate_state(), for state() and load_state().
  virtual std::vector<std::pair<std::string, const std::vector<Tensor>*>> state_buffers() const = 0;
  /// A zeroed state buffer per gradient group, in the gradients' dtype (f32, or f64), for moments:
  /// the group's size, or sharded the size of this rank's chunks.
  std::vector<Tensor> allocate_state() const { return store_.allocate_state(); }
  const std::vector<Piece>& pieces() const { return store_.pieces(); }
  /// Piece k's view of one of allocate_state()'s buffers (shaped like the piece's `value`).
  Tensor state_piece(const std::vector<Tensor>& flats, size_t k) const { return store_.state_piece(flats, k); }
  /// The dtype of the optimizer's state: f64 when any parameter is f64, else f32.
  DType state_dtype() const { return store_.state_dtype(); }
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

  StepPolicy policy_;
  StepState state_;

 private:
  ParameterStore store_;
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
