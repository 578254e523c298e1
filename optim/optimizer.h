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

class Optimizer {
 public:
  /// Takes the trainable parameters among `params` (frozen ones are skipped; at least one must
  /// be trainable), attaches their gradient views and allocates the master weights.
  Optimizer(std::vector<Tensor> params, double lr, StepPolicy policy);
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
  /// The master weights, one flat buffer per gradient group, laid out like grad_buffer().
  const std::vector<Tensor>& master_buffers() const { return master_flats_; }
  /// The optimizer state as named tensors, for checkpoints: "<i>.master" and "<i>.<moment>" for
  /// parameter i (AdamW's "m" and "v", SGD's "momentum"), and the "applied" and "skipped" step
  /// counts. load_state restores it: shapes must match and every per-parameter name must be
  /// present; counts missing from older files are taken from set_step_count (call it first).
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 protected:
  /// The update of every parameter, reading state_ (lr, applied, keep, clip).
  virtual void update() = 0;
  /// Parameter i's state beyond its master weights, by name, for state() and load_state().
  virtual std::vector<std::pair<std::string, Tensor>> moments(size_t i) const = 0;
  /// A zeroed state buffer per gradient group, in the gradients' dtype (f32, or f64), for moments.
  std::vector<Tensor> allocate_state() const;
  /// Parameter i's view of one of allocate_state()'s buffers.
  Tensor state_view(const std::vector<Tensor>& flats, size_t i) const;
  /// Parameter i's master weights (the parameter itself when it is stored in its master dtype).
  const Tensor& master(size_t i) const { return masters_[i]; }
  bool own_master(size_t i) const { return params_[i].shares_storage(masters_[i]); }
  /// The dtype of the optimizer's state: f64 when any parameter is f64, else f32.
  DType state_dtype() const { return state_.lr.dtype(); }
  /// The update's dispatch: fused mode, and the fused kernels take every parameter, its gradient
  /// and its master.
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
  StepState state_;
  GradBuffer grads_;

 private:
  std::vector<Tensor> master_flats_, masters_;
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
