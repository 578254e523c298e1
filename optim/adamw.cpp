#include "optim/adamw.h"

#include <cmath>

#include "lib/autograd.h"
#include "lib/error.h"
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

std::map<std::string, Tensor> AdamW::state() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::string k = std::to_string(i);
    out[k + ".m"] = state_[i].m;
    out[k + ".v"] = state_[i].v;
    out[k + ".master"] = state_[i].master;
  }
  return out;
}

void AdamW::load_state(const std::map<std::string, Tensor>& state) {
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::string k = std::to_string(i);
    for (auto [suffix, slot] : {std::pair<const char*, Tensor*>{".m", &state_[i].m}, {".v", &state_[i].v},
                                {".master", &state_[i].master}}) {
      auto it = state.find(k + suffix);
      FT_CHECK(it != state.end(), "AdamW::load_state: missing '", k, suffix, "'");
      FT_CHECK(it->second.shape() == slot->shape(), "AdamW::load_state: '", k, suffix, "' has shape ",
               shape_str(it->second.shape()), ", expected ", shape_str(slot->shape()));
      slot->copy_(it->second.to(slot->device()));
    }
    // A parameter that is its own master was just overwritten; a separate master refreshes it.
    if (!params_[i].shares_storage(state_[i].master)) params_[i].copy_(state_[i].master);
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
