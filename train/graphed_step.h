// One whole training step (zero_grad, forward, loss, backward, optimizer update with clipping)
// replayed from a CUDA graph: after a few eager steps the step is captured once, on fixed input
// buffers, and every later call copies its batch into those buffers and replays the graph. A
// caller that uploads its batch straight into input_buffers() spares that copy.
// The host then enqueues one graph launch per step instead of hundreds of kernels.
//
// What changes between steps is read from device memory by the captured kernels: the batch
// (copied into the fixed buffers before each replay), the learning rate and step counts (the
// optimizer's device state; set_lr must be called before run(), outside the graph) and the
// Philox offsets of dropout. The gradients are allocated and released inside the graph (each
// replay reuses the graph's own memory), so between steps the parameters hold no .grad().
//
// A batch of another shape runs eagerly. When the capture fails (an op that synchronizes, for
// instance), run() says so once on stderr and continues eagerly: training is never stopped by
// a missing graph, and GraphedStep::replaying() tells which path ran.
#pragma once
#include <functional>
#include <memory>
#include <utility>

#include "lib/runtime.h"
#include "lib/tensor.h"

namespace ft {

class Optimizer;

/// One step on (inputs, targets), gradients zeroed first; returns the loss ([] tensor).
using StepFn = std::function<Tensor(const Tensor& inputs, const Tensor& targets)>;

/// The usual training step: optimizer.zero_grad(), loss = loss_fn(inputs, targets),
/// loss.backward(), optimizer.step(); returns the loss, detached.
StepFn training_step(Optimizer& optimizer, StepFn loss_fn);

class GraphedStep {
 public:
  using StepFn = ft::StepFn;
  /// release_grads drops every parameter's .grad() (Optimizer::zero_grad does).
  GraphedStep(StepFn step, std::function<void()> release_grads, int64_t eager_steps = 2);
  /// training_step(optimizer, loss_fn), its gradients released by optimizer.zero_grad().
  GraphedStep(Optimizer& optimizer, StepFn loss_fn);
  ~GraphedStep();

  /// Runs one step; the loss returned lives in a buffer the next call overwrites. Batches that
  /// already are the fixed buffers are not copied.
  Tensor run(const Tensor& inputs, const Tensor& targets);
  /// The fixed device buffers a batch shaped like these host tensors is replayed from (made on
  /// first use), for the caller to upload into. A shape other than the captured one gets fresh
  /// tensors (that batch runs eagerly).
  std::pair<Tensor, Tensor> input_buffers(const Tensor& inputs, const Tensor& targets, Device device);
  bool replaying() const { return graph_ != nullptr; }

 private:
  Tensor eager(const Tensor& inputs, const Tensor& targets);
  /// Whether the fixed buffers are (or can become) those of a batch like this one.
  bool fits(const Tensor& inputs, const Tensor& targets, Device device) const;

  StepFn step_;
  std::function<void()> release_grads_;
  int64_t eager_steps_, calls_ = 0;
  bool capture_failed_ = false;
  Tensor inputs_, targets_, loss_;
  std::unique_ptr<CapturedGraph> graph_;
};

}  // namespace ft
