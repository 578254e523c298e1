#include "optim/sgd.h"

#include "lib/autograd.h"
#include "lib/ops/elementwise.h"

namespace ft {

SGD::SGD(std::vector<Tensor> params, Options options) : Optimizer(std::move(params)), options_(options) {
  lr_ = options_.lr;
  momentum_.resize(params_.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  ++step_count_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = cast(p.grad(), p.dtype());
    if (options_.weight_decay != 0.0) g = g + p.detach() * options_.weight_decay;
    if (options_.momentum != 0.0) {
      momentum_[i] = momentum_[i].defined() ? momentum_[i] * options_.momentum + g : g;
      g = momentum_[i];
    }
    p.assign_(p.detach() - g * lr_);
  }
}

}  // namespace ft
