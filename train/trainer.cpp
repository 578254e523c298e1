#include "train/trainer.h"

#include <cmath>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise.h"

namespace ft {

Trainer::Trainer(Module& model, Optimizer& optimizer, LossFn loss_fn, Options options)
    : model_(model),
      optimizer_(optimizer),
      loss_fn_(std::move(loss_fn)),
      options_(std::move(options)),
      log_(options_.unit, options_.metrics_path) {}

Tensor Trainer::step(const Tensor& inputs, const Tensor& targets) {
  optimizer_.set_lr(options_.schedule.at(global_step_));  // device state: read by a replay too
  ++global_step_;
  if (!uses_graph(inputs.device())) return training_step(optimizer_, loss_fn_)(inputs, targets);
  return graphed().run(inputs, targets);
}

GraphedStep& Trainer::graphed() {
  if (!graphed_) graphed_ = std::make_unique<GraphedStep>(optimizer_, loss_fn_);
  return *graphed_;
}

std::pair<Tensor, Tensor> Trainer::upload(const Tensor& inputs, const Tensor& targets, Device device) {
  if (!uses_graph(device)) return {inputs.to(device), targets.to(device)};
  // Straight into the graph's fixed buffers: the replay then starts with no copy of its own.
  auto buffers = graphed().input_buffers(inputs, targets, device);
  buffers.first.copy_(inputs);
  buffers.second.copy_(targets);
  return buffers;
}

EpochStats Trainer::train_epoch(BatchSampler& sampler, const Tensor& inputs, const Tensor& targets, Device device,
                                int64_t epoch, int64_t epochs) {
  model_.train();
  sampler.start_epoch(epoch);
  StepTimer timer(device);
  const int64_t steps = sampler.batches_per_epoch();
  const int64_t total = steps * epochs;
  std::vector<double> kept_ms;
  double loss_sum = 0;
  int64_t loss_count = 0;
  int64_t batch_size = 0;
  for (int64_t b = 0; b < steps; ++b) {
    const Tensor ids = sampler.batch_ids(b);
    batch_size = ids.numel();
    const auto [x, y] = upload(take_rows(inputs, ids, kCPU), take_rows(targets, ids, kCPU), device);
    timer.begin_step();
    const Tensor loss = step(x, y);
    timer.end_step();
    const bool last = b + 1 == steps;
    if ((b + 1) % options_.log_every != 0 && !last) continue;
    // A logging step: read the loss and the step times (this waits for the device).
    StepMetrics m;
    m.step = global_step_;
    m.total_steps = total;
    m.loss = loss.item();
    FT_CHECK(std::isfinite(m.loss), "training diverged: the loss is ", m.loss, " at step ", global_step_);
    m.lr = optimizer_.lr();
    if (options_.log_grad_norm) {
      // The optimizer's own norm when its policy took one (no extra pass), else computed here.
      const Tensor norm = optimizer_.last_grad_norm();
      if (norm.defined()) m.grad_norm = norm.item();
      else if (!replaying()) m.grad_norm = grad_norm(optimizer_.params()).item();  // a replay keeps no .grad()
    }
    m.skipped_steps = optimizer_.skipped_steps();
    std::vector<double> window = timer.collect();
    const int64_t first_in_window = global_step_ - static_cast<int64_t>(window.size());
    for (size_t i = 0; i < window.size(); ++i)
      if (first_in_window + static_cast<int64_t>(i) >= options_.warmup_steps) kept_ms.push_back(window[i]);
    m.ms = median(window);
    m.items_per_s = m.ms > 0 ? static_cast<double>(batch_size) * 1000.0 / m.ms : 0.0;
    log_.log(m);
    loss_sum += m.loss;
    ++loss_count;
  }
  EpochStats stats;
  stats.steps = steps;
  stats.mean_loss = loss_count ? loss_sum / static_cast<double>(loss_count) : 0.0;
  stats.median_ms = median(kept_ms);
  stats.items_per_s = stats.median_ms > 0 ? static_cast<double>(batch_size) * 1000.0 / stats.median_ms : 0.0;
  return stats;
}

double evaluate_accuracy(Module& model, const Tensor& inputs, const Tensor& labels, int64_t batch, Device device,
                         DType dtype) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  BatchSampler sampler(inputs.size(0), batch, 0, /*shuffle=*/false, /*drop_last=*/false);
  int64_t correct = 0;
  for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) {
    const Tensor ids = sampler.batch_ids(b);
    const Tensor logits = model.forward(cast(take_rows(inputs, ids, device), dtype));
    const std::vector<double> values = logits.to_vector();
    const std::vector<double> truth = take_rows(labels, ids, kCPU).to_vector();
    const int64_t classes = logits.size(-1);
    for (int64_t r = 0; r < ids.numel(); ++r) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (values[static_cast<size_t>(r * classes + c)] > values[static_cast<size_t>(r * classes + best)]) best = c;
      correct += best == static_cast<int64_t>(truth[static_cast<size_t>(r)]);
    }
  }
  model.train(was_training);
  return static_cast<double>(correct) / static_cast<double>(inputs.size(0));
}

}  // namespace ft
