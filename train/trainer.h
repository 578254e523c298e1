// The training loop: forward, backward and optimizer step over an in-memory dataset, with a
// step timer and the metrics line. It never branches on KernelMode: the ops dispatch.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "layers/module.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/batches.h"
#include "train/graphed_step.h"
#include "train/metrics.h"
#include "train/step_timer.h"

namespace ft {

struct EpochStats {
  double mean_loss = 0;    // over the epoch's logged steps
  double median_ms = 0;    // per step, steps after the warm-up
  double items_per_s = 0;  // from the median step time
  int64_t steps = 0;
};

class Trainer {
 public:
  /// Forward pass plus loss for one batch; returns a [] loss tensor.
  using LossFn = std::function<Tensor(const Tensor& inputs, const Tensor& targets)>;
  struct Options {
    int64_t log_every = 10;     // steps between metrics lines (each line reads the loss: a sync)
    int64_t warmup_steps = 2;   // steps left out of the timing statistics
    std::string metrics_path;   // JSONL file; empty for none
    std::string unit = "samples";
    LRSchedule schedule;
    bool log_grad_norm = true;
    /// On CUDA, replay the whole step from a CUDA graph after two eager steps (GraphedStep).
    /// The grad norm is then the optimizer's own (its clipping policy takes it), or not shown.
    bool graph = false;
  };
  Trainer(Module& model, Optimizer& optimizer, LossFn loss_fn, Options options);

  /// One step on a batch already on the device: returns the loss tensor without reading it.
  Tensor step(const Tensor& inputs, const Tensor& targets);
  /// Whether the last step was replayed from a CUDA graph.
  bool replaying() const { return graphed_ && graphed_->replaying(); }

  /// One epoch over rows of `inputs` / `targets` (CPU tensors) in the sampler's order.
  EpochStats train_epoch(BatchSampler& sampler, const Tensor& inputs, const Tensor& targets, Device device,
                         int64_t epoch, int64_t epochs);

  int64_t global_step() const { return global_step_; }

 private:
  bool uses_graph(Device device) const { return options_.graph && device.is_cuda(); }
  GraphedStep& graphed();  // made on first use
  /// A host batch on the device: into the graph's fixed buffers when the step is replayed.
  std::pair<Tensor, Tensor> upload(const Tensor& inputs, const Tensor& targets, Device device);

  Module& model_;
  Optimizer& optimizer_;
  LossFn loss_fn_;
  Options options_;
  MetricsLog log_;
  std::unique_ptr<GraphedStep> graphed_;
  int64_t global_step_ = 0;
};

/// Fraction of rows whose arg-max logit equals the label, evaluated in batches in eval mode.
double evaluate_accuracy(Module& model, const Tensor& inputs, const Tensor& labels, int64_t batch, Device device,
                         DType dtype);

}  // namespace ft
