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
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;
  double lr_ = 1e-3;
  int64_t step_count_ = 0;
};

/// Global L2 norm of all parameters' gradients (f32 accumulation), as a [] tensor; no sync.
Tensor grad_norm(const std::vector<Tensor>& params);

}  // namespace ft
