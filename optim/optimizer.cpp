#include "optim/optimizer.h"

#include <cmath>
#include <limits>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/reduce.h"
#include "optim/multi_tensor.h"

namespace ft {

namespace {

DType state_dtype_for(const std::vector<Tensor>& params) {
  for (const Tensor& p : params)
    if (p.dtype() == DType::F64) return DType::F64;
  return DType::F32;
}

std::vector<Tensor> gradients(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

bool fused_for(const std::vector<Tensor>& tensors, DType state_dtype) {
  return !tensors.empty() && use_fused(tensors.front()) && multi_tensor::fused_supported(tensors, state_dtype);
}

// The twin of the norm: a sum of squares per tensor (f32, or f64 for f64 gradients), added up.
Tensor grad_norm_twin(const std::vector<Tensor>& grads, DType dtype) {
  Tensor total;
  for (const Tensor& g : grads) {
    Tensor wide = cast(g, dtype);
    Tensor sq = sum_all(wide * wide);
    total = total.defined() ? total + sq : sq;
  }
  return sqrt(total).reshape({1});
}

// The twin of settle_step, in primitive ops on the one-element state tensors.
void settle_step_twin(const std::vector<Tensor>& grads, const StepState& state, const StepPolicy& policy) {
  const Tensor one = scalar_like(state.keep, 1.0);
  if (grads.empty()) {
    state.keep.fill_(1.0);
    state.clip.fill_(1.0);
  } else {
    const Tensor norm = grad_norm_twin(grads, state.keep.dtype());
    state.grad_norm.copy_(norm);
    // norm >= 0, so "finite" is norm < inf (false for NaN and inf).
    const Tensor finite = cast(lt(norm, scalar_like(norm, std::numeric_limits<double>::infinity())), norm.dtype());
    state.keep.copy_(policy.skip_nonfinite ? finite : one);
    if (policy.max_grad_norm > 0) {
      const Tensor factor = pow(norm + 1e-6, -1.0) * policy.max_grad_norm;
      state.clip.copy_(where(lt(factor, one), factor, one));
    } else {
      state.clip.fill_(1.0);
    }
  }
  // copy_, not assign_: the state tensors keep their storage, which captured kernels point at.
  state.applied.copy_(state.applied + state.keep);
  state.skipped.copy_(state.skipped + (1.0 - state.keep));
}

}  // namespace

namespace {

// The parameters an optimizer takes: the trainable leaves (frozen ones have nothing to update).
std::vector<Tensor> trainable(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    check_defined(p, "Optimizer", "parameter");
    FT_CHECK(!p.grad_fn(), "Optimizer: parameters must be leaf tensors, not results of an op");
    FT_CHECK(p.device() == params.front().device(), "Optimizer: parameters on different devices (",
             p.device().str(), " and ", params.front().device().str(), ")");
    if (p.requires_grad()) out.push_back(p);
  }
  FT_CHECK(!out.empty(), "Optimizer: no trainable parameters among the ", params.size(), " given");
  return out;
}

// Makes a parameter stored in its master dtype live in the master buffer: its storage becomes
// the view's (values copied first), keeping the tensor's identity for the model that holds it.
void move_into(const Tensor& param, const Tensor& view) {
  view.copy_(param.detach());
  TensorImpl* impl = param.impl();
  impl->storage = view.impl()->storage;
  impl->byte_offset = view.impl()->byte_offset;
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr, StepPolicy policy)
    : params_(trainable(params)), policy_(policy), grads_(params_), lr_(lr) {
  FT_CHECK(policy_.max_grad_norm >= 0, "Optimizer: max_grad_norm must be >= 0, got ", policy_.max_grad_norm);
  const DType dtype = state_dtype_for(params_);
  const Device device = params_.front().device();
  auto scalar = [&](double v) { return Tensor::full({1}, v, dtype, device); };
  state_ = StepState{scalar(lr), scalar(0), scalar(0), scalar(std::numeric_limits<double>::quiet_NaN()), scalar(1),
                     scalar(1)};
  NoGradGuard no_grad;
  master_flats_ = allocate_state();
  for (size_t i = 0; i < params_.size(); ++i) {
    masters_.push_back(state_view(master_flats_, i));
    if (params_[i].dtype() == masters_[i].dtype()) move_into(params_[i], masters_[i]);
    else masters_[i].copy_(params_[i].detach());
  }
}

std::vector<Tensor> Optimizer::allocate_state() const {
  std::vector<Tensor> flats;
  for (size_t g = 0; g < grads_.layout().groups().size(); ++g) flats.push_back(grads_.layout().allocate(g));
  return flats;
}

Tensor Optimizer::state_view(const std::vector<Tensor>& flats, size_t i) const {
  return grads_.layout().view(flats.at(grads_.layout().slot(i).group), i);
}

void Optimizer::set_lr(double lr) {
  lr_ = lr;
  state_.lr.fill_(lr);
}

DeviceWrites::Scalar Optimizer::set_lr_deferred(double lr) {
  FT_CHECK(state_.lr.is_cuda() && state_.lr.dtype() == DType::F32, "Optimizer::set_lr_deferred: the learning rate ",
           "lives on ", state_.lr.device().str(), " as ", dtype_name(state_.lr.dtype()), ", not as f32 on CUDA");
  lr_ = lr;
  return {state_.lr.data<float>(), static_cast<float>(lr)};
}

void Optimizer::set_step_count(int64_t steps) {
  FT_CHECK(steps >= 0 && steps <= (int64_t{1} << 24), "Optimizer::set_step_count: ", steps,
           " is outside [0, 2^24] (the device counters are exact up to 2^24)");
  step_count_ = steps;
  state_.applied.fill_(static_cast<double>(steps));
  state_.skipped.fill_(0.0);
}

void Optimizer::set_skipped_steps(int64_t skipped) {
  FT_CHECK(skipped >= 0 && skipped <= step_count_, "Optimizer::set_skipped_steps: ", skipped,
           " is outside [0, step_count() = ", step_count_, "]");
  state_.applied.fill_(static_cast<double>(step_count_ - skipped));
  state_.skipped.fill_(static_cast<double>(skipped));
}

bool Optimizer::fused_update() const {
  std::vector<Tensor> touched;
  for (size_t i = 0; i < params_.size(); ++i) touched.insert(touched.end(), {params_[i].grad(), params_[i], masters_[i]});
  return use_fused(params_.front()) && multi_tensor::fused_supported(touched, state_dtype());
}

Tensor Optimizer::scalar_as(const Tensor& scalar, DType dtype) {
  return scalar.dtype() == dtype ? scalar : cast(scalar, dtype);
}

Tensor Optimizer::keep_mask(DType dtype) const {
  if (!policy_.skip_nonfinite) return Tensor();
  return gt(scalar_as(state_.keep, dtype), Tensor::zeros({1}, dtype, state_.keep.device()));
}

// In place (copy_, not assign_): parameters and state keep their storage, so a captured step's
// kernels, which hold their addresses, still find them on every replay.
void Optimizer::store_unless_skipped(const Tensor& slot, const Tensor& updated, const Tensor& keep) {
  slot.copy_(keep.defined() ? where(keep, updated, slot) : updated);
}

std::map<std::string, Tensor> Optimizer::state() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = std::to_string(i) + ".";
    out[prefix + "master"] = masters_[i];
    for (const auto& [name, tensor] : moments(i)) out[prefix + name] = tensor;
  }
  out["applied"] = state_.applied;
  out["skipped"] = state_.skipped;
  return out;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& state) {
  for (size_t i = 0; i < params_.size(); ++i) {
    std::vector<std::pair<std::string, Tensor>> slots = moments(i);
    slots.emplace_back("master", masters_[i]);
    for (const auto& [name, slot] : slots) {
      const std::string key = std::to_string(i) + "." + name;
      auto it = state.find(key);
      FT_CHECK(it != state.end(), "Optimizer::load_state: missing '", key, "'");
      FT_CHECK(it->second.shape() == slot.shape(), "Optimizer::load_state: '", key, "' has shape ",
               shape_str(it->second.shape()), ", expected ", shape_str(slot.shape()));
      slot.copy_(it->second.to(slot.device()));
    }
    // A parameter that is its own master was just overwritten; a separate master refreshes it.
    if (!own_master(i)) params_[i].copy_(masters_[i]);
  }
  for (auto [name, slot] : {std::pair<const char*, const Tensor*>{"applied", &state_.applied},
                            {"skipped", &state_.skipped}}) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    FT_CHECK(it->second.numel() == 1, "Optimizer::load_state: '", name, "' must hold one value, has ",
             it->second.numel());
    slot->copy_(cast(it->second.to(slot->device()).reshape({1}), slot->dtype()));
  }
}

int64_t Optimizer::applied_steps() const { return static_cast<int64_t>(state_.applied.item()); }
int64_t Optimizer::skipped_steps() const { return static_cast<int64_t>(state_.skipped.item()); }

void Optimizer::zero_grad() { grads_.zero(); }

void Optimizer::step() {
  NoGradGuard no_grad;
  ++step_count_;
  // Parameters the backward did not reach still hold the last step's values: zero them first.
  grads_.materialize();
  // The norm is only taken when something reads it; the update then needs no separate pass. It
  // reads the flat buffers whole (their gaps hold zeros), not one tensor per parameter.
  const bool need_norm = policy_.max_grad_norm > 0 || policy_.skip_nonfinite;
  const std::vector<Tensor> grads = need_norm ? grads_.flats() : std::vector<Tensor>{};
  if (fused_for(grads.empty() ? std::vector<Tensor>{params_.front()} : grads, state_dtype()))
    multi_tensor::settle_step(grads, state_, policy_);
  else
    settle_step_twin(grads, state_, policy_);
  norm_computed_ = need_norm;
  update();
}

Tensor grad_norm(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients(params);
  FT_CHECK(!grads.empty(), "grad_norm: no parameter has a gradient");
  if (fused_for(grads, DType::F32)) {
    const Tensor norm = Tensor::empty({1}, DType::F32, grads.front().device());
    multi_tensor::settle_step(grads, StepState{.grad_norm = norm}, StepPolicy{.skip_nonfinite = false});
    return norm.reshape({});
  }
  const DType dtype = grads.front().dtype() == DType::F64 ? DType::F64 : DType::F32;
  return grad_norm_twin(grads, dtype).reshape({});
}

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  FT_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  const std::vector<Tensor> grads = gradients(params);
  FT_CHECK(!grads.empty(), "clip_grad_norm: no parameter has a gradient");
  const StepPolicy policy{.max_grad_norm = max_norm, .skip_nonfinite = false};
  if (fused_for(grads, DType::F32)) {
    const Device device = grads.front().device();
    const StepState s{.grad_norm = Tensor::empty({1}, DType::F32, device), .clip = Tensor::empty({1}, DType::F32, device)};
    multi_tensor::settle_step(grads, s, policy);
    multi_tensor::scale(grads, s.clip);
    return s.grad_norm.reshape({});
  }
  const Tensor norm = grad_norm_twin(grads, grads.front().dtype() == DType::F64 ? DType::F64 : DType::F32);
  const Tensor one = scalar_like(norm, 1.0);
  const Tensor factor = pow(norm + 1e-6, -1.0) * max_norm;
  const Tensor clip = where(lt(factor, one), factor, one);
  for (const Tensor& g : grads) g.assign_(g * cast(clip, g.dtype()));
  return norm.reshape({});
}

}  // namespace ft
