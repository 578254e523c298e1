#include "optim/sgd.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise.h"
#include "optim/multi_tensor.h"

namespace ft {

SGD::SGD(std::vector<Tensor> params, Options options)
    : Optimizer(std::move(params), options.lr, options.policy), options_(options) {
  if (options_.momentum != 0.0) momentum_flats_ = allocate_state();
  for (size_t i = 0; i < params_.size(); ++i)
    slots_.push_back(Slot{master(i), momentum_flats_.empty() ? Tensor() : state_view(momentum_flats_, i)});
}

std::vector<std::pair<std::string, Tensor>> SGD::moments(size_t i) const {
  if (!slots_[i].momentum.defined()) return {};
  return {{"momentum", slots_[i].momentum}};
}

void SGD::update() {
  if (fused_update()) {
    std::vector<multi_tensor::ParamSlots> slots;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Slot& s = slots_[i];
      const Tensor& p = params_[i];
      slots.push_back({p.grad(), p, own_master(i) ? Tensor() : s.master, s.momentum, Tensor(), true,
                       static_cast<int32_t>(i)});
    }
    multi_tensor::sgd(slots, {options_.momentum, options_.weight_decay}, state_);
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i) update_twin(i);
}

void SGD::update_twin(size_t i) {
  const Tensor& p = params_[i];
  Slot& s = slots_[i];
  const DType md = s.master.dtype();
  auto as_master = [md](const Tensor& scalar) { return scalar_as(scalar, md); };
  const Tensor lr = as_master(state_.lr);
  Tensor d = cast(p.grad(), md);
  if (policy_.max_grad_norm > 0) d = d * as_master(state_.clip);
  if (options_.weight_decay != 0.0) d = d + s.master * options_.weight_decay;
  const Tensor momentum = options_.momentum != 0.0 ? s.momentum * options_.momentum + d : Tensor();
  if (momentum.defined()) d = momentum;
  const Tensor master = s.master - d * lr;
  const Tensor keep = keep_mask(md);
  if (momentum.defined()) store_unless_skipped(s.momentum, momentum, keep);
  store_unless_skipped(s.master, master, keep);
  if (!own_master(i)) p.copy_(cast(s.master, p.dtype()));
}

}  // namespace ft
