// The training loop every binary uses. Batches come from a BatchSource through a Prefetcher
// (loaded on a thread, uploaded on CUDA beside the running step); the loss is a function of
// (model, batch). The Trainer owns gradient accumulation, the learning-rate schedule, the
// metrics line and JSONL, evaluation, checkpoints, the whole step as a CUDA graph and resume.
// Clipping and non-finite skipping are the optimizer's StepPolicy; the loop reports its norm.
// It never branches on KernelMode: the ops dispatch themselves.
//
// Times are honest: a line's ms/step and items/s are the wall clock between two logging points
// (which synchronize, since they read the loss) over the steps between them, data included;
// work done between steps at the loop's request (evaluation, checkpoints, samples) is left out.
// Beside them the line shows the median of the steps alone from CUDA events ("gpu"; on the CPU
// a steady clock around the step, "step"), so that the two can be compared.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/module.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/data/batch.h"
#include "train/data/batch_source.h"
#include "train/loop/graphed_step.h"
#include "train/loop/metrics.h"
#include "train/loop/prefetcher.h"
#include "train/loop/step_timer.h"

namespace ft {

/// What one Trainer::fit() measured. Times are over the steps after the warm-up (all of them
/// when the run is shorter than the warm-up).
struct FitSummary {
  int64_t steps = 0;        // steps this fit() ran
  int64_t timed_steps = 0;  // of them, those the times are over
  double wall_ms = 0;       // wall clock per step, data included, evaluation and checkpoints not
  double step_ms = 0;       // median of the steps alone (CUDA events on a GPU)
  double items_per_s = 0;   // from wall_ms
  std::optional<double> mfu = {};  // from wall_ms, when FLOPs per item and the device's peak are known
  double final_loss = 0;    // mean loss of the last logging window (Options::window_loss), else the last loss read
  std::map<std::string, double> eval = {};  // the last evaluation's metrics
  bool replayed = false;    // the last step ran from a CUDA graph
};

class Trainer {
 public:
  /// Metrics of the model on held-out data; runs in eval mode without autograd.
  using EvalFn = std::function<std::map<std::string, double>(Module& model)>;
  /// Saves a checkpoint after `step` steps; the data continues from `position`. Called on every
  /// rank of a data-parallel run: with ZeRO-1 Optimizer::state() gathers the shards (a
  /// collective), and sharded tables are written by each rank; the rest rank 0 alone must write
  /// (cli::wire_checkpoints does).
  using CheckpointFn = std::function<void(int64_t step, const DataPosition& position)>;
  /// After the backward of step `step` (0 for the first step of a run) and before its optimizer
  /// step, with its micro-batches (on the training device) and loss.
  using AfterBackwardFn = std::function<void(int64_t step, const std::vector<Batch>& micro_batches, const Tensor& loss)>;
  /// Work done every `every` steps, after the step's line and evaluation (ft-gpt2's samples).
  struct Periodic {
    int64_t every = 0;
    std::function<void(int64_t step)> run;
  };

  struct Options {
    int64_t grad_accum = 1;           ///< micro-batches per optimizer step, each loss scaled by 1/grad_accum
    LRSchedule schedule = {};         ///< optimizer.set_lr(schedule.at(step)) before each step
    int64_t log_every = 10;           ///< steps between lines (each reads the loss: a sync); 0: no lines
    std::string metrics_path = {};    ///< JSONL file of the lines and evaluations; empty for none
    std::string unit = "samples";     ///< what is counted per second: "samples", "tok"
    int64_t items_per_batch = 0;      ///< items in one micro-batch; 0: its rows (first tensor's leading dim)
    std::optional<double> flops_per_item = {};  ///< model FLOPs per item, forward and backward, for MFU
    int64_t warmup_steps = 3;         ///< steps left out of FitSummary's times (two eager steps and the capture)
    bool graph = false;               ///< CUDA: replay the whole step from a CUDA graph after two eager steps
    /// Add every step's loss on the device (one small kernel a step, outside the step's graph): a
    /// line then shows the mean loss since the last line, and FitSummary::final_loss is the last
    /// window's mean. Off: a line shows its own step's loss.
    bool window_loss = true;
                                      ///< (one small kernel a step)
    EvalFn eval = {};                 ///< every eval_every steps and at the last step of fit()
    int64_t eval_every = 0;           ///< 0: only at the last step
    CheckpointFn checkpoint = {};     ///< every checkpoint_every steps and at the end of fit()
    int64_t checkpoint_every = 0;     ///< 0: only at the end
    std::vector<Periodic> periodic = {};
    AfterBackwardFn after_backward = {};  ///< set: every step runs eagerly (it reads the gradients)
    int64_t prefetch_depth = 3;       ///< batches the loader thread keeps ready
    /// A line (every log_every steps, and the last step) that finds this many steps in a row
    /// skipped for a non-finite gradient norm stops the run with an ft::Error: it has diverged.
    /// The checkpoints written so far are kept. 0: never stop.
    int64_t max_skipped_in_a_row = 10;
    /// Set: the gradients are averaged over the ranks before each optimizer step; items per
    /// second count the global batch; only rank 0 prints, records metrics and checkpoints.
    GradientSync* data_parallel = nullptr;
  };

  /// The model's parameters say the device it trains on. The source is read from its current
  /// position (resume() moves it) by a loader thread from the first fit() on; until the trainer
  /// is destroyed nothing else may use it.
  Trainer(Module& model, Optimizer& optimizer, BatchSource& source, LossFn loss_fn, Options options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Continues a run: `step` steps are done (the optimizer's state is restored by the caller) and
  /// the data continues from `position`. Before the first fit() only.
  void resume(int64_t step, const DataPosition& position);
  /// Runs steps until `total_steps` are done. A NaN or infinite loss at a logged step (and at the
  /// last one) is an ft::Error; so is an error of the source.
  FitSummary fit(int64_t total_steps);

  /// Steps done.
  int64_t step() const { return step_; }
  /// The data position after the last batch a step took.
  DataPosition data_position() const;
  /// Rank 0 of a data-parallel run, or a single process: the one that prints and checkpoints.
  bool primary() const { return !options_.data_parallel || options_.data_parallel->rank() == 0; }
  int world_size() const { return options_.data_parallel ? options_.data_parallel->world_size() : 1; }
  /// Whether the last step was replayed from a CUDA graph.
  bool replaying() const { return graphed_ && graphed_->replaying(); }

 private:
  struct Window;
  /// What a line reports of one step. On CUDA its values (loss, gradient norm, skip count, the
  /// window's loss sum, the device error word) are copied to page-locked memory when the step ends, before the next
  /// step is enqueued (which overwrites a replay's loss and the optimizer's norm), and read after
  /// an event: the host then waits for that step alone, not for the one running after it.
  struct LinePoint {
    int64_t step = 0;
    Tensor loss, grad_norm, skipped, window_loss, skip_run;  // window_loss: the window's summed losses
    bool print = false;
    bool staged = false;
  };
  LinePoint line_point(const Tensor& loss, const Tensor& window_loss, bool print);
  Tensor run_step(const std::vector<Batch>& micro_batches);
  /// Synchronizes, then runs work that is not a training step and leaves its time out of the
  /// step times.
  void outside_steps(Window& window, const std::function<void()>& work);
  /// Reads the point (a sync on its step) and prints or records its line; `running` steps enqueued
  /// after it are left running and their times for the next line.
  void log_line(Window& window, const LinePoint& point, int64_t total_steps, size_t running, FitSummary& summary);

  Module& model_;
  Optimizer& optimizer_;
  BatchSource& source_;
  Options options_;
  Device device_;
  DType dtype_;
  std::optional<double> peak_flops_;
  StepFn step_fn_;
  std::unique_ptr<GraphedStep> graphed_;
  MetricsLog log_;
  StepTimer timer_;
  int64_t step_ = 0;
  int64_t items_per_step_ = 0;
  std::unique_ptr<Prefetcher> prefetcher_;
  void* line_host_ = nullptr;  // page-locked staging of a LinePoint's values (CUDA)
  std::unique_ptr<StreamEvent> line_ready_;
};

}  // namespace ft
