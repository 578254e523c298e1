#include "train/loop/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/runtime.h"
#include "train/loop/mfu.h"
#include "train/loop/startup.h"

namespace ft {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }


Device training_device(const Module& model) {
  const std::vector<Tensor> params = model.parameters();
  FT_CHECK(!params.empty(), "Trainer: the model has no parameters");
  return params.front().device();
}

DType training_dtype(const Module& model) { return model.parameters().front().dtype(); }

}  // namespace

// The wall clock of the current logging window and of the timed part of fit().
struct Trainer::Window {
  Clock::time_point start;  // the previous logging point, or fit()'s start
  int64_t first_step = 0;   // steps done at `start`
  double excluded_s = 0;    // time spent outside steps since `start`
  Tensor loss_sum;          // the window's losses, added on the device
  int64_t losses = 0;
  int64_t timed_from = 0;   // the timed part starts after this many steps
  bool timing = false;
  Clock::time_point timed_start;
  double timed_excluded_s = 0;
  std::vector<double> timed_step_ms;  // the steps' own times, timed part only
};

Trainer::Trainer(Module& model, Optimizer& optimizer, BatchSource& source, LossFn loss_fn, Options options)
    : model_(model),
      optimizer_(optimizer),
      source_(source),
      options_(std::move(options)),
      device_(training_device(model)),
      dtype_(training_dtype(model)),
      peak_flops_(device_peak_flops(device_, dtype_)),
      // Only rank 0 writes the metrics file (the others would truncate and interleave it).
      log_(options_.unit, primary() ? options_.metrics_path : std::string(), device_.is_cuda() ? "gpu" : "step"),
      timer_(device_) {
  FT_CHECK(options_.grad_accum >= 1, "Trainer: grad_accum must be at least 1, got ", options_.grad_accum);
  FT_CHECK(options_.log_every >= 0 && options_.warmup_steps >= 0, "Trainer: log_every and warmup_steps must not be negative");
  BackwardDoneFn after_backward;
  if (options_.after_backward)
    after_backward = [this](const std::vector<Batch>& micro_batches, const Tensor& loss) {
      options_.after_backward(step_, micro_batches, loss);
    };
  step_fn_ = training_step(model_, optimizer_, std::move(loss_fn), std::move(after_backward), options_.data_parallel);
  // A hook that reads the gradients cannot run inside a graph.
  if (options_.graph && device_.is_cuda() && !options_.after_backward)
    graphed_ = std::make_unique<GraphedStep>(step_fn_);
}

Trainer::~Trainer() {
  prefetcher_.reset();
  if (line_ready_) {
    try {
      line_ready_->synchronize();  // a copy into the staging may still be in flight
    } catch (const Error&) {
    }
  }
  runtime::release_pinned(line_host_);
}

void Trainer::resume(int64_t step, const DataPosition& position) {
  FT_CHECK(!prefetcher_, "Trainer::resume: the run has started already");
  FT_CHECK(step >= 0, "Trainer::resume: negative step ", step);
  source_.set_position(position);
  step_ = step;
}

DataPosition Trainer::data_position() const { return prefetcher_ ? prefetcher_->position() : source_.position(); }

Tensor Trainer::run_step(const std::vector<Batch>& micro_batches) {
  const double lr = options_.schedule.at(step_);
  // Under a graph the learning rate is one of the replay's inputs: no fill between two replays.
  if (graphed_) return graphed_->run(micro_batches, {optimizer_.set_lr_deferred(lr)});
  optimizer_.set_lr(lr);
  return step_fn_(micro_batches);
}

void Trainer::outside_steps(Window& window, const std::function<void()>& work) {
  synchronize();  // the steps enqueued so far are step time, not this work's
  const Clock::time_point start = Clock::now();
  work();
  const double s = seconds(Clock::now() - start);
  window.excluded_s += s;
  if (window.timing) window.timed_excluded_s += s;
}

namespace {

constexpr size_t kStagedValue = 8;  // bytes per staged value: any scalar dtype fits
// Staged in order: loss, gradient norm, skip count, the window's loss sum, then the error word.
constexpr int kErrorWordSlot = 5, kStagedValues = 6;

double host_scalar(const void* p, DType dtype) {
  switch (dtype) {
    case DType::F32: return *static_cast<const float*>(p);
    case DType::F64: return *static_cast<const double*>(p);
    case DType::BF16: return static_cast<float>(*static_cast<const bf16*>(p));
    case DType::I32: return *static_cast<const int32_t*>(p);
    case DType::I64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::U8: return *static_cast<const uint8_t*>(p);
  }
  return 0.0;
}

}  // namespace

Trainer::LinePoint Trainer::line_point(const Tensor& loss, const Tensor& window_loss, bool print) {
  LinePoint point;
  point.step = step_;
  point.print = print;
  point.loss = loss;
  point.grad_norm = optimizer_.last_grad_norm();
  point.skipped = optimizer_.step_state().skipped;
  point.skip_run = optimizer_.step_state().skip_run;
  point.window_loss = window_loss;
  if (!device_.is_cuda()) return point;
  if (!line_host_) {
    line_host_ = runtime::allocate_pinned(kStagedValues * kStagedValue);
    line_ready_ = std::make_unique<StreamEvent>();
  }
  // One kernel writes them all into the pinned staging (which the GPU reaches directly).
  char* staged = static_cast<char*>(line_host_);
  const Tensor* values[] = {&point.loss, &point.grad_norm, &point.skipped, &point.window_loss, &point.skip_run};
  DeviceWrites copies;
  for (int i = 0; i < kErrorWordSlot; ++i)
    if (values[i]->defined()) copies.copies.push_back({staged + i * kStagedValue, values[i]->data_ptr(), values[i]->nbytes()});
  copies.copies.push_back({staged + kErrorWordSlot * kStagedValue, runtime::device_error_word_address(), sizeof(unsigned)});
  runtime::write_on_device(copies);
  line_ready_->record(StreamEvent::Stream::Compute);
  point.staged = true;
  return point;
}

void Trainer::log_line(Window& window, const LinePoint& point, int64_t total_steps, size_t running,
                       FitSummary& summary) {
  const bool print = point.print;
  StepMetrics m;
  m.step = point.step;
  m.total_steps = total_steps;
  // Waits for the point's step (the wall clock below covers it), not for the step after it.
  const char* staged = static_cast<const char*>(line_host_);
  if (point.staged) {
    line_ready_->synchronize();
    if (*reinterpret_cast<const unsigned*>(staged + kErrorWordSlot * kStagedValue) != 0)
      synchronize();  // raises the kernel's error
  }
  auto value = [&](const Tensor& t, int i) {
    return point.staged ? host_scalar(staged + i * kStagedValue, t.dtype()) : t.item();
  };
  m.loss = value(point.loss, 0);
  if (options_.window_loss && window.losses > 0) {
    m.loss = value(point.window_loss, 3) / static_cast<double>(window.losses);
    m.loss_steps = window.losses;
  }
  // Data-parallel: the step's loss is already the mean over the ranks (training_step).
  m.ranks = world_size();
  m.items_per_step = items_per_step_;
  const Clock::time_point now = Clock::now();
  // A run of skipped steps says more than the loss it left behind, so it is checked first.
  const int64_t skip_run = point.skip_run.defined() ? static_cast<int64_t>(value(point.skip_run, 4)) : 0;
  FT_CHECK(options_.max_skipped_in_a_row <= 0 || skip_run < options_.max_skipped_in_a_row,
           "training diverged: the last ", skip_run, " steps up to step ", point.step, " were all skipped for a ",
           "non-finite gradient norm (the run stops at ", options_.max_skipped_in_a_row, " in a row: --max-skipped). ",
           "Lower the learning rate or clip harder; the checkpoints written so far are kept");
  FT_CHECK(std::isfinite(m.loss), "training diverged: the loss is ", m.loss, " at step ", point.step);
  const int64_t steps = point.step - window.first_step;
  m.ms = (seconds(now - window.start) - window.excluded_s) * 1000.0 / static_cast<double>(steps);
  const std::vector<double> times = timer_.collect(running);
  for (size_t i = 0; i < times.size(); ++i) {
    const int64_t step = point.step - static_cast<int64_t>(times.size()) + 1 + static_cast<int64_t>(i);
    if (window.timing && step > window.timed_from) window.timed_step_ms.push_back(times[i]);
  }
  if (!times.empty()) m.step_ms = median(times);
  m.items_per_s = m.ms > 0 ? static_cast<double>(items_per_step_) * 1000.0 / m.ms : 0.0;
  if (options_.flops_per_item) {
    m.mfu = mfu(*options_.flops_per_item, m.items_per_s / world_size(), peak_flops_);
    m.mfu_expected = true;
  }
  m.lr = options_.schedule.at(point.step - 1);
  if (point.grad_norm.defined()) m.grad_norm = value(point.grad_norm, 1);
  m.skipped_steps = static_cast<int64_t>(value(point.skipped, 2));
  if (print && primary()) {
    // The start-up time is that of the process's first step, printed with its first line.
    if (const std::string startup = take_startup_summary(); !startup.empty()) std::cout << startup << std::endl;
    log_.log(m);
  }
  summary.final_loss = m.loss;  // the window's mean, over the ranks too
  window.start = now;
  window.first_step = point.step;
  window.excluded_s = 0;
  window.losses = 0;  // the next step overwrites loss_sum
}

FitSummary Trainer::fit(int64_t total_steps) {
  FT_CHECK(total_steps >= step_, "Trainer::fit: ", total_steps, " steps asked for, but ", step_, " are done");
  const int64_t accum = options_.grad_accum;
  // Two device slots per micro-batch: one step's in use, the next step's uploaded beside it.
  if (!prefetcher_)
    prefetcher_ = std::make_unique<Prefetcher>(
        source_, Prefetcher::Options{.device = device_, .depth = options_.prefetch_depth, .device_slots = 2 * accum});
  model_.train();
  FitSummary summary;
  const int64_t first = step_;
  Window window;
  window.start = Clock::now();
  window.first_step = first;
  window.timed_from = total_steps - first > options_.warmup_steps ? first + options_.warmup_steps : first;
  if (window.timed_from == first) {
    window.timing = true;
    window.timed_start = window.start;
  }
  timer_.collect();  // times of an earlier fit() that no line took
  std::vector<Batch> micro_batches(static_cast<size_t>(accum));
  std::optional<LinePoint> pending;
  while (step_ < total_steps) {
    for (Batch& b : micro_batches) b = prefetcher_->next();
    if (items_per_step_ == 0)  // summed over the ranks: the global batch
      items_per_step_ = world_size() * accum *
                        (options_.items_per_batch > 0 ? options_.items_per_batch : micro_batches[0].rows());
    if (options_.data_parallel) options_.data_parallel->begin_step(step_ + 1);
    const bool first_in_process = !startup_done();
    if (first_in_process) mark_startup("first batch");
    timer_.begin_step();
    const Tensor loss = run_step(micro_batches);
    timer_.end_step();
    if (options_.data_parallel) options_.data_parallel->end_step();
    for (Batch& b : micro_batches) b = Batch();
    prefetcher_->release();
    ++step_;
    // The next step's batches go up now, beside this step, not after the sync of a logging step.
    if (step_ < total_steps) prefetcher_->upload_ahead(accum);
    if (first_in_process) {
      synchronize();
      mark_startup_done("first step");
    }
    if (!window.timing && step_ == window.timed_from) {
      synchronize();
      window.timing = true;
      window.timed_start = Clock::now();
    }
    const bool last = step_ == total_steps;
    const bool print = options_.log_every > 0 && (step_ % options_.log_every == 0 || last);
    // On CUDA a line is read one step late: its values are staged to host memory when its step
    // ends, the next step is enqueued, and only then does the host wait (for its step alone), read
    // and print, so the GPU runs meanwhile instead of idling. The last step, and a step that work
    // outside the steps follows, are read at once; on the CPU every line is.
    if (pending) {
      log_line(window, *pending, total_steps, 1, summary);
      pending.reset();
    }
    if (options_.window_loss) {  // one buffer, added into in place: no allocation a step
      if (!window.loss_sum.defined()) window.loss_sum = Tensor::empty({1}, DType::F32, device_);
      accumulate_into(window.loss_sum, loss, /*overwrite=*/window.losses == 0);
    }
    ++window.losses;
    const bool outside_due =
        (options_.eval && options_.eval_every > 0 && step_ % options_.eval_every == 0) ||
        (options_.checkpoint && options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0) ||
        std::any_of(options_.periodic.begin(), options_.periodic.end(),
                    [&](const Periodic& p) { return p.every > 0 && step_ % p.every == 0; });
    const Tensor window_loss = options_.window_loss ? window.loss_sum : Tensor();
    if (print && !last && !outside_due && device_.is_cuda()) pending = line_point(loss, window_loss, print);
    else if (print || last) log_line(window, line_point(loss, window_loss, print), total_steps, 0, summary);
    if (last) {
      summary.timed_steps = total_steps - window.timed_from;
      summary.wall_ms = (seconds(window.start - window.timed_start) - window.timed_excluded_s) * 1000.0 /
                        static_cast<double>(summary.timed_steps);
      summary.step_ms = median(window.timed_step_ms);
      summary.items_per_s = static_cast<double>(items_per_step_) * 1000.0 / summary.wall_ms;
      if (options_.flops_per_item)
        summary.mfu = mfu(*options_.flops_per_item, summary.items_per_s / world_size(), peak_flops_);
      summary.replayed = replaying();
    }
    // The checkpoint comes before the evaluation, so a failing one cannot lose the step's weights.
    // Every rank calls it: ZeRO-1's state is gathered over the ranks, and sharded tables are
    // written by each rank; the callback has rank 0 alone write the rest.
    if (options_.checkpoint &&
        (last || (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0)))
      outside_steps(window, [&] { options_.checkpoint(step_, prefetcher_->position()); });
    if (options_.eval && (last || (options_.eval_every > 0 && step_ % options_.eval_every == 0)))
      outside_steps(window, [&] {
        NoGradGuard no_grad;
        model_.eval();
        summary.eval = options_.eval(model_);
        model_.train();
        for (const auto& [name, value] : summary.eval)
          FT_CHECK(name.find("loss") == std::string::npos || std::isfinite(value), "training diverged: the evaluation's ",
                   name, " is ", value, " at step ", step_, "; the checkpoints written so far are kept");
        if (primary()) log_.log_eval(step_, summary.eval);
      });
    for (const Periodic& p : options_.periodic)
      if (p.every > 0 && step_ % p.every == 0) outside_steps(window, [&] { p.run(step_); });
  }
  summary.steps = step_ - first;
  return summary;
}

}  // namespace ft
