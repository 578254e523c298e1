// One whole training step replayed from a CUDA graph: after a few eager steps the step is
// captured once, on fixed device buffers (one per named tensor of each micro-batch), and every
// later call replays the graph. The host then enqueues one graph launch per step instead of
// hundreds of kernels, and nothing else: the graph's first node, the device-writes kernel
// (lib/runtime.h, DeviceWrites), copies the call's micro-batches into the fixed buffers and writes
// the call's device values (the learning rate), its arguments set anew for each replay. A short
// step loses no time between two replays to copies or fills of its own.
//
// The captured step is exactly the training step: optimizer.zero_grad() (lazy: no kernel), then
// for each micro-batch its scaled loss and backward, then optimizer.step(). What else changes
// between steps is read from device memory by the captured kernels: the optimizer's step counts
// and the Philox offsets of dropout.
//
// Micro-batches of other shapes run eagerly. When the capture fails (an op that synchronizes,
// for instance), run() says so once on stderr and continues eagerly: training is never stopped
// by a missing graph, and GraphedStep::replaying() tells which path ran.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "lib/runtime.h"
#include "lib/tensor.h"
#include "train/data/batch.h"
#include "train/loop/gradient_sync.h"

namespace ft {

class Optimizer;

/// One optimizer step over the micro-batches of a step; returns the step's loss ([] tensor).
using StepFn = std::function<Tensor(const std::vector<Batch>& micro_batches)>;

/// Called after the last micro-batch's backward and before optimizer.step(), with the step's
/// micro-batches and loss: the gradients are complete and not yet clipped (parity dumps).
using BackwardDoneFn = std::function<void(const std::vector<Batch>& micro_batches, const Tensor& loss)>;

/// The training step: optimizer.zero_grad(); for each of the n micro-batches,
/// (loss_fn(model, batch) · 1/n).backward(); after_backward when set; optimizer.step(). Returns
/// the sum of the scaled losses (the mean over the micro-batches), detached. `sync`, when set,
/// brackets each backward (data parallelism averages the gradients), before after_backward, and
/// the loss returned is averaged over its ranks after the optimizer step.
StepFn training_step(Module& model, Optimizer& optimizer, LossFn loss_fn, BackwardDoneFn after_backward = {},
                     GradientSync* sync = nullptr);

class GraphedStep {
 public:
  /// `step` runs eagerly `eager_steps` times (so that optimizer state, scratch buffers and
  /// cuBLASLt workspaces exist outside the graph), then is captured.
  explicit GraphedStep(StepFn step, int64_t eager_steps = 2);
  ~GraphedStep();

  /// Runs one step; the loss returned lives in a buffer the next call overwrites. Host batches
  /// run eagerly; device batches are copied into the fixed buffers first (unless they are them).
  /// `values` are written to the device before the step (Optimizer::set_lr_deferred's write),
  /// by the graph itself when it replays.
  Tensor run(const std::vector<Batch>& micro_batches, const std::vector<DeviceWrites::Scalar>& values = {});
  bool replaying() const { return graph_ != nullptr; }

 private:
  /// Does `writes` (the step's values, and its batch copies when there are any), then the step.
  Tensor eager(const std::vector<Batch>& micro_batches, const DeviceWrites& writes);
  /// Whether the fixed buffers are those of micro-batches like these.
  bool fits(const std::vector<Batch>& micro_batches) const;

  StepFn step_;
  int64_t eager_steps_, calls_ = 0;
  bool capture_failed_ = false;
  std::vector<Batch> fixed_;
  Tensor loss_;
  std::unique_ptr<CapturedGraph> graph_;
};

}  // namespace ft
