#include "train/graphed_step.h"

#include <cstdio>

#include "lib/error.h"
#include "optim/optimizer.h"

namespace ft {

StepFn training_step(Optimizer& optimizer, StepFn loss_fn) {
  return [&optimizer, loss_fn = std::move(loss_fn)](const Tensor& inputs, const Tensor& targets) {
    optimizer.zero_grad();
    Tensor loss = loss_fn(inputs, targets);
    loss.backward();
    optimizer.step();
    return loss.detach();
  };
}

GraphedStep::GraphedStep(StepFn step, std::function<void()> release_grads, int64_t eager_steps)
    : step_(std::move(step)), release_grads_(std::move(release_grads)), eager_steps_(eager_steps) {}

// The gradients live in the optimizer's persistent flat buffer, zeroed inside each step: there is
// nothing to release around the capture.
GraphedStep::GraphedStep(Optimizer& optimizer, StepFn loss_fn)
    : GraphedStep(training_step(optimizer, std::move(loss_fn)), [] {}) {}

GraphedStep::~GraphedStep() = default;

Tensor GraphedStep::eager(const Tensor& inputs, const Tensor& targets) {
  const Tensor loss = step_(inputs, targets).detach();
  if (!loss_.defined() || loss_.shape() != loss.shape() || loss_.dtype() != loss.dtype())
    loss_ = Tensor::empty(loss.shape(), loss.dtype(), loss.device());
  loss_.copy_(loss);
  return loss_;
}

bool GraphedStep::fits(const Tensor& inputs, const Tensor& targets, Device device) const {
  auto same = [device](const Tensor& fixed, const Tensor& t) {
    return fixed.defined() && fixed.shape() == t.shape() && fixed.dtype() == t.dtype() && fixed.device() == device;
  };
  return same(inputs_, inputs) && same(targets_, targets);
}

std::pair<Tensor, Tensor> GraphedStep::input_buffers(const Tensor& inputs, const Tensor& targets, Device device) {
  if (!fits(inputs, targets, device)) {
    auto fresh = [device](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), device); };
    if (graph_) return {fresh(inputs), fresh(targets)};  // another shape than the captured one
    inputs_ = fresh(inputs);
    targets_ = fresh(targets);
  }
  return {inputs_, targets_};
}

Tensor GraphedStep::run(const Tensor& inputs, const Tensor& targets) {
  if (!inputs.is_cuda() || capture_failed_) return eager(inputs, targets);
  if (graph_ && !fits(inputs, targets, inputs.device())) return eager(inputs, targets);  // not the captured shape
  input_buffers(inputs, targets, inputs.device());  // (re)made for this shape while nothing is captured
  if (inputs.data_ptr() != inputs_.data_ptr()) inputs_.copy_(inputs);
  if (targets.data_ptr() != targets_.data_ptr()) targets_.copy_(targets);
  if (++calls_ <= eager_steps_ || !loss_.defined()) return eager(inputs_, targets_);
  if (!graph_) {
    // Whatever the first steps set up (optimizer state, scratch buffers) now exists outside
    // the graph; the gradients are released so that the graph allocates and frees its own.
    release_grads_();
    try {
      graph_ = std::make_unique<CapturedGraph>([&] {
        loss_.copy_(step_(inputs_, targets_).detach());
        release_grads_();
      });
    } catch (const Error& e) {
      capture_failed_ = true;
      std::fprintf(stderr, "note: the training step could not be captured as a CUDA graph; it runs eagerly (%s)\n",
                   e.what());
      return eager(inputs_, targets_);
    }
  }
  graph_->replay();
  return loss_;
}

}  // namespace ft
