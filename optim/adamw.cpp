#include "optim/adamw.h"

#include <cmath>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "optim/multi_tensor.h"

namespace ft {

AdamW::AdamW(std::vector<Tensor> params, Options options)
    : Optimizer(std::move(params), options.lr, options.policy, options.partition),
      options_(std::move(options)),
      m_flats_(allocate_state()),
      v_flats_(allocate_state()) {
  for (size_t k = 0; k < pieces().size(); ++k) {
    const Tensor& p = this->params()[pieces()[k].param];
    slots_.push_back(Slot{state_piece(m_flats_, k), state_piece(v_flats_, k),
                          options_.decays ? options_.decays(p) : p.dim() >= 2});
  }
}

std::vector<std::pair<std::string, const std::vector<Tensor>*>> AdamW::state_buffers() const {
  return {{"m", &m_flats_}, {"v", &v_flats_}};
}

void AdamW::update() {
  if (fused_update()) {
    std::vector<multi_tensor::ParamSlots> slots;
    for (size_t k = 0; k < pieces().size(); ++k) {
      const Slot& s = slots_[k];
      const Piece& p = pieces()[k];
      slots.push_back({p.grad, p.value, p.master, s.m, s.v, s.decay, static_cast<int32_t>(k)});
    }
    if constexpr (kCudaBuild)
      multi_tensor::adamw(slots,
                          {options_.beta1, options_.beta2, options_.eps, options_.weight_decay,
                           options_.stochastic_rounding, options_.seed},
                          state_);
    return;
  }
  for (size_t k = 0; k < pieces().size(); ++k) update_twin(k);
}

void AdamW::update_twin(size_t k) {
  const Piece& p = pieces()[k];
  const Slot& s = slots_[k];
  const Tensor& master_slot = p.master.defined() ? p.master : p.value;
  const DType md = master_slot.dtype();
  auto as_master = [md](const Tensor& scalar) { return scalar_as(scalar, md); };
  const Tensor lr = as_master(state_.lr), t = as_master(state_.applied);
  const double b1 = options_.beta1, b2 = options_.beta2;
  Tensor g = cast(p.grad, md);
  if (policy_.max_grad_norm > 0) g = g * as_master(state_.clip);
  const Tensor m = s.m * b1 + g * (1.0 - b1);
  const Tensor v = s.v * b2 + g * g * (1.0 - b2);
  // 1 − β^t with t on the device, as exp(t·log β) (the fused kernel uses the same formula).
  const Tensor bias1 = 1.0 - exp(t * std::log(b1)), bias2 = 1.0 - exp(t * std::log(b2));
  const Tensor update = (m / bias1) / (sqrt(v / bias2) + options_.eps);
  const Tensor decayed = s.decay ? master_slot * (1.0 - lr * options_.weight_decay) : master_slot;
  const Tensor master = decayed - update * lr;
  const Tensor keep = keep_mask(md);
  store_unless_skipped(s.m, m, keep);
  store_unless_skipped(s.v, v, keep);
  store_unless_skipped(master_slot, master, keep);
  if (p.master.defined()) p.value.copy_(cast(p.master, p.value.dtype()));
}

}  // namespace ft
