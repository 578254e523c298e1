#include "optim/adamw.h"

#include <cmath>

#include "lib/autograd.h"
#include "lib/ops/elementwise.h"

namespace ft {

namespace {
DType master_dtype(const Tensor& p) { return p.dtype() == DType::F64 ? DType::F64 : DType::F32; }
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, Options options) : Optimizer(std::move(params)), options_(std::move(options)) {
  lr_ = options_.lr;
  NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    State s;
    const DType md = master_dtype(p);
    s.master = p.dtype() == md ? p.detach() : cast(p.detach(), md);
    s.m = Tensor::zeros(p.shape(), md, p.device());
    s.v = Tensor::zeros(p.shape(), md, p.device());
    s.decay = options_.decays ? options_.decays(p) : p.dim() >= 2;
    state_.push_back(std::move(s));
  }
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_count_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step_count_));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(step_count_));
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    State& s = state_[i];
    Tensor g = cast(p.grad(), s.master.dtype());
    s.m.assign_(s.m * b1 + g * (1.0 - b1));
    s.v.assign_(s.v * b2 + g * g * (1.0 - b2));
    Tensor update = (s.m * (1.0 / bias1)) / (sqrt(s.v * (1.0 / bias2)) + options_.eps);
    Tensor decayed = s.decay ? s.master * (1.0 - lr_ * options_.weight_decay) : s.master;
    s.master.assign_(decayed - update * lr_);
    if (!p.shares_storage(s.master)) p.assign_(cast(s.master, p.dtype()));
  }
}

}  // namespace ft
