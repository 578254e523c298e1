// Optimizer interface: owns per-parameter state and updates parameters from their .grad().
#pragma once
#include <vector>

#include "lib/tensor.h"

namespace ft {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  /// Applies one update from the parameters' current gradients (parameters without one are skipped).
  virtual void step() = 0;
  /// Drops every parameter's gradient.
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return step_count_; }
  /// For resuming: the number of steps already taken (bias corrections and schedules use it).
  void set_step_count(int64_t steps) { step_count_ = steps; }
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;
  double lr_ = 1e-3;
  int64_t step_count_ = 0;
};

/// Global L2 norm of all parameters' gradients (f32 accumulation), as a [] tensor; no sync.
Tensor grad_norm(const std::vector<Tensor>& params);

/// Scales every gradient by min(1, max_norm / norm) where norm is their global L2 norm, without
/// reading the device (the factor stays a device tensor); returns the norm before clipping.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace ft
