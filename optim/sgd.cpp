#include "optim/sgd.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "optim/multi_tensor.h"

namespace ft {

SGD::SGD(std::vector<Tensor> params, Options options)
    : Optimizer(std::move(params), options.lr, options.policy, options.partition), options_(options) {
  if (options_.momentum == 0.0) return;
  momentum_flats_ = allocate_state();
  for (size_t k = 0; k < pieces().size(); ++k) momentum_.push_back(state_piece(momentum_flats_, k));
}

std::vector<std::pair<std::string, const std::vector<Tensor>*>> SGD::state_buffers() const {
  if (momentum_flats_.empty()) return {};
  return {{"momentum", &momentum_flats_}};
}

void SGD::update() {
  if (fused_update()) {
    std::vector<multi_tensor::ParamSlots> slots;
    for (size_t k = 0; k < pieces().size(); ++k) {
      const Piece& p = pieces()[k];
      slots.push_back({p.grad, p.value, p.master, momentum_.empty() ? Tensor() : momentum_[k], Tensor(), true,
                       static_cast<int32_t>(k)});
    }
    if constexpr (kCudaBuild) multi_tensor::sgd(slots, {options_.momentum, options_.weight_decay}, state_);
    return;
  }
  for (size_t k = 0; k < pieces().size(); ++k) update_twin(k);
}

void SGD::update_twin(size_t k) {
  const Piece& p = pieces()[k];
  const Tensor& master_slot = p.master.defined() ? p.master : p.value;
  const Tensor momentum_slot = momentum_.empty() ? Tensor() : momentum_[k];
  const DType md = master_slot.dtype();
  auto as_master = [md](const Tensor& scalar) { return scalar_as(scalar, md); };
  const Tensor lr = as_master(state_.lr);
  Tensor d = cast(p.grad, md);
  if (policy_.max_grad_norm > 0) d = d * as_master(state_.clip);
  if (options_.weight_decay != 0.0) d = d + master_slot * options_.weight_decay;
  const Tensor momentum = momentum_slot.defined() ? momentum_slot * options_.momentum + d : Tensor();
  if (momentum.defined()) d = momentum;
  const Tensor master = master_slot - d * lr;
  const Tensor keep = keep_mask(md);
  if (momentum.defined()) store_unless_skipped(momentum_slot, momentum, keep);
  store_unless_skipped(master_slot, master, keep);
  if (p.master.defined()) p.value.copy_(cast(p.master, p.value.dtype()));
}

}  // namespace ft
