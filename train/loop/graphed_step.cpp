#include "train/loop/graphed_step.h"

#include <cstdio>

#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/runtime.h"
#include "optim/optimizer.h"

namespace ft {

StepFn training_step(Module& model, Optimizer& optimizer, LossFn loss_fn, BackwardDoneFn after_backward,
                     GradientSync* sync) {
  return [&model, &optimizer, loss_fn = std::move(loss_fn), after_backward = std::move(after_backward),
          sync](const std::vector<Batch>& micro_batches) {
    FT_CHECK(!micro_batches.empty(), "training step: no micro-batches");
    const double scale = 1.0 / static_cast<double>(micro_batches.size());
    optimizer.zero_grad();
    if (sync) sync->before_forward();
    Tensor total;
    for (size_t k = 0; k < micro_batches.size(); ++k) {
      Tensor loss = loss_fn(model, micro_batches[k]);
      FT_CHECK(loss.numel() == 1, "training step: the loss must be one value, got shape ", shape_str(loss.shape()));
      // Each micro-batch's mean loss over 1/n: the accumulated gradient is that of the mean over
      // all of them. One micro-batch keeps backward's unit seed (no scaling kernel).
      if (micro_batches.size() > 1) loss = loss * scale;
      if (sync) sync->before_backward(k + 1 == micro_batches.size());
      loss.backward();
      total = total.defined() ? total + loss.detach() : loss.detach();
    }
    if (sync) sync->after_backward();
    if (after_backward) after_backward(micro_batches, total);
    optimizer.step();
    // The loss this step reports is the global batch's: a line then needs no collective of its
    // own, and a rank whose loss is not finite stops every rank alike.
    if (sync && sync->world_size() > 1) sync->average_over_ranks(total);
    return total;
  };
}

GraphedStep::GraphedStep(StepFn step, int64_t eager_steps) : step_(std::move(step)), eager_steps_(eager_steps) {}

GraphedStep::~GraphedStep() = default;

Tensor GraphedStep::eager(const std::vector<Batch>& micro_batches, const DeviceWrites& writes) {
  runtime::write_on_device(writes);
  const Tensor loss = step_(micro_batches).detach();
  if (!loss_.defined() || loss_.shape() != loss.shape() || loss_.dtype() != loss.dtype() ||
      loss_.device() != loss.device())
    loss_ = Tensor::empty(loss.shape(), loss.dtype(), loss.device());
  loss_.copy_(loss);
  return loss_;
}

bool GraphedStep::fits(const std::vector<Batch>& micro_batches) const {
  if (fixed_.size() != micro_batches.size()) return false;
  for (size_t i = 0; i < fixed_.size(); ++i) {
    if (fixed_[i].size() != micro_batches[i].size()) return false;
    for (const auto& [name, t] : micro_batches[i]) {
      if (!fixed_[i].contains(name)) return false;
      const Tensor& f = fixed_[i].at(name);
      if (f.shape() != t.shape() || f.dtype() != t.dtype() || f.device() != t.device()) return false;
    }
  }
  return true;
}

Tensor GraphedStep::run(const std::vector<Batch>& micro_batches, const std::vector<DeviceWrites::Scalar>& values) {
  FT_CHECK(!micro_batches.empty(), "GraphedStep: no micro-batches");
  DeviceWrites inputs;
  inputs.scalars = values;
  if (!micro_batches[0].device().is_cuda() || capture_failed_) {
    return eager(micro_batches, inputs);
  }
  if (!fits(micro_batches)) {
    if (graph_) {  // not the captured shapes
      return eager(micro_batches, inputs);
    }
    // (Re)made while nothing is captured: the eager steps before the capture use them too.
    fixed_.clear();
    for (const Batch& b : micro_batches) {
      Batch fixed;
      for (const auto& [name, t] : b) fixed.set(name, Tensor::empty(t.shape(), t.dtype(), t.device()));
      fixed_.push_back(std::move(fixed));
    }
  }
  // The batches go into the fixed buffers by the device-writes kernel, inside the graph once
  // captured; a step with more tensors than its table holds copies the rest first.
  for (size_t i = 0; i < micro_batches.size(); ++i)
    for (const auto& [name, t] : micro_batches[i]) {
      const Tensor& f = fixed_[i].at(name);
      if (t.shares_storage(f)) continue;
      if (inputs.copies.size() < DeviceWrites::kMaxCopies) inputs.copies.push_back({f.data_ptr(), t.data_ptr(), t.nbytes()});
      else f.copy_(t);
    }
  if (++calls_ <= eager_steps_ || !loss_.defined()) {
    return eager(fixed_, inputs);
  }
  if (!graph_) {
    release_cached_memory_for_capture();
    try {
      graph_ = std::make_unique<CapturedGraph>([&] { loss_.copy_(step_(fixed_).detach()); }, &inputs);
    } catch (const Error& e) {
      capture_failed_ = true;
      std::fprintf(stderr, "note: the training step could not be captured as a CUDA graph; it runs eagerly (%s)\n",
                   e.what());
      return eager(fixed_, inputs);
    }
  }
  graph_->replay(inputs);
  return loss_;
}

}  // namespace ft
