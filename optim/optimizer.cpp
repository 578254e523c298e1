#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/reduce/reduce.h"
#include "optim/multi_tensor.h"

namespace ft {

namespace {

std::vector<Tensor> gradients(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

bool fused_for(const std::vector<Tensor>& tensors, DType state_dtype) {
  if constexpr (kCudaBuild)
    return !tensors.empty() && use_fused(tensors.front()) && multi_tensor::fused_supported(tensors, state_dtype);
  return false;
}

// The twin of the norm: a sum of squares per tensor (f32, or f64 for f64 gradients), added up.
Tensor sum_of_squares_twin(const std::vector<Tensor>& grads, DType dtype) {
  Tensor total;
  for (const Tensor& g : grads) {
    Tensor wide = cast(g, dtype);
    Tensor sq = sum_all(wide * wide);
    total = total.defined() ? total + sq : sq;
  }
  return total.reshape({1});
}

Tensor grad_norm_twin(const std::vector<Tensor>& grads, DType dtype) { return sqrt(sum_of_squares_twin(grads, dtype)); }

// The twin of settle_step, in primitive ops on the one-element state tensors.
void settle_step_twin(const std::vector<Tensor>& grads, const StepState& state, const StepPolicy& policy,
                      const std::function<void(const Tensor&)>& sum_across) {
  const Tensor one = scalar_like(state.keep, 1.0);
  if (grads.empty() && !sum_across) {
    state.keep.fill_(1.0);
    state.clip.fill_(1.0);
  } else {
    const DType dtype = state.keep.dtype();
    Tensor squares = grads.empty() ? Tensor::zeros({1}, dtype, state.keep.device()) : sum_of_squares_twin(grads, dtype);
    if (sum_across) sum_across(squares);
    const Tensor norm = sqrt(squares);
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
  if (state.skip_run.defined()) state.skip_run.copy_((state.skip_run + 1.0) * (1.0 - state.keep));
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr, StepPolicy policy, DataPartition partition)
    : policy_(policy), store_(params, partition), lr_(lr) {
  FT_CHECK(policy_.max_grad_norm >= 0, "Optimizer: max_grad_norm must be >= 0, got ", policy_.max_grad_norm);
  const DType dtype = store_.state_dtype();
  const Device device = store_.params().front().device();
  auto scalar = [&](double v) { return Tensor::full({1}, v, dtype, device); };
  state_ = StepState{.lr = scalar(lr),
                     .applied = scalar(0),
                     .skipped = scalar(0),
                     .skip_run = scalar(0),
                     .grad_norm = scalar(std::numeric_limits<double>::quiet_NaN()),
                     .keep = scalar(1),
                     .clip = scalar(1)};
}

int64_t Optimizer::state_bytes() const {
  size_t bytes = static_cast<size_t>(store_.master_bytes());
  for (const auto& [name, flats] : state_buffers())
    for (const Tensor& t : *flats)
      if (t.defined()) bytes += t.nbytes();
  return static_cast<int64_t>(bytes);
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
  state_.skip_run.fill_(0.0);
}

void Optimizer::set_skipped_steps(int64_t skipped) {
  FT_CHECK(skipped >= 0 && skipped <= step_count_, "Optimizer::set_skipped_steps: ", skipped,
           " is outside [0, step_count() = ", step_count_, "]");
  state_.applied.fill_(static_cast<double>(step_count_ - skipped));
  state_.skipped.fill_(static_cast<double>(skipped));
  state_.skip_run.fill_(0.0);
}

bool Optimizer::fused_update() const {
  std::vector<Tensor> touched;
  for (const Piece& p : pieces()) touched.insert(touched.end(), {p.grad, p.value, p.master});
  if constexpr (kCudaBuild) return use_fused(params().front()) && multi_tensor::fused_supported(touched, state_dtype());
  return false;
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
  const FlatLayout& layout = store_.grads().layout();
  std::map<std::string, Tensor> out;
  auto add = [&](const std::string& name, const std::vector<Tensor>& whole) {
    for (size_t i = 0; i < params().size(); ++i) {
      const Tensor view = layout.view(whole[layout.slot(i).group], i);
      // Sharded, each gathered buffer is a whole copy on every rank: its values go to the host
      // before the next is gathered, so that one buffer at a time is on the device (an 8B
      // model's masters and two moments are 96 GB of f32). Unsharded, the buffers' own views.
      out[std::to_string(i) + "." + name] = sharded() ? view.to(kCPU) : view;
    }
  };
  // Sharded, gathered from every rank: an f32 group's masters are the parameters, whole on every
  // rank; a bf16 group's, and the moments, are chunks.
  add("master", store_.whole());
  for (const auto& [name, flats] : state_buffers()) add(name, store_.whole(flats));
  out["applied"] = state_.applied;
  out["skipped"] = state_.skipped;
  return out;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& state) {
  NoGradGuard no_grad;
  const std::vector<Tensor>& params = this->params();
  auto find = [&](size_t i, const std::string& name) {
    const std::string key = std::to_string(i) + "." + name;
    auto it = state.find(key);
    FT_CHECK(it != state.end(), "Optimizer::load_state: missing '", key, "'");
    FT_CHECK(it->second.shape() == params[i].shape(), "Optimizer::load_state: '", key, "' has shape ",
             shape_str(it->second.shape()), ", expected ", shape_str(params[i].shape()));
    return it->second.to(params[i].device());
  };
  for (size_t i = 0; i < params.size(); ++i) {
    for (const auto& [name, flats] : state_buffers()) store_.load_into(*flats, i, find(i, name));
    store_.load_master(i, find(i, "master"));
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

void Optimizer::zero_grad() { store_.grads().zero(); }

void Optimizer::step() {
  NoGradGuard no_grad;
  ++step_count_;
  // Parameters the backward did not reach still hold the last step's values: zero them first.
  store_.grads().materialize();
  if (store_.shards_gradients()) (void)store_.collectives("reads its gradients from a data-parallel reduction");
  // The norm is only taken when something reads it; the update then needs no separate pass. It
  // reads the flat buffers whole (their gaps hold zeros), not one tensor per parameter; sharded,
  // this rank's reduced chunks, and the sum of squares is added up over the ranks.
  const bool need_norm = policy_.max_grad_norm > 0 || policy_.skip_nonfinite;
  std::vector<Tensor> grads;
  std::function<void(const Tensor&)> sum_across;
  if (need_norm && sharded()) {
    ShardCollectives& comm = store_.collectives("adds its gradient norm up");
    for (const Piece& p : pieces()) grads.push_back(p.grad);
    sum_across = [&comm](const Tensor& t) { comm.sum(t); };
  } else if (need_norm) {
    grads = store_.grads().flats();
  }
  if (!fused_for(grads.empty() ? std::vector<Tensor>{params().front()} : grads, state_dtype()))
    settle_step_twin(grads, state_, policy_, sum_across);
  else if constexpr (kCudaBuild)
    multi_tensor::settle_step(grads, state_, policy_, sum_across);
  norm_computed_ = need_norm;
  update();
  if (sharded()) store_.gather_parameters();
}

Tensor grad_norm(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients(params);
  FT_CHECK(!grads.empty(), "grad_norm: no parameter has a gradient");
  if constexpr (kCudaBuild) {
    if (fused_for(grads, DType::F32)) {
      const Tensor norm = Tensor::empty({1}, DType::F32, grads.front().device());
      multi_tensor::settle_step(grads, StepState{.grad_norm = norm}, StepPolicy{.skip_nonfinite = false}, {});
      return norm.reshape({});
    }
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
  if constexpr (kCudaBuild) {
    if (fused_for(grads, DType::F32)) {
      const Device device = grads.front().device();
      const StepState s{.grad_norm = Tensor::empty({1}, DType::F32, device),
                        .clip = Tensor::empty({1}, DType::F32, device)};
      multi_tensor::settle_step(grads, s, policy);
      multi_tensor::scale(grads, s.clip);
      return s.grad_norm.reshape({});
    }
  }
  const Tensor norm = grad_norm_twin(grads, grads.front().dtype() == DType::F64 ? DType::F64 : DType::F32);
  const Tensor one = scalar_like(norm, 1.0);
  const Tensor factor = pow(norm + 1e-6, -1.0) * max_norm;
  const Tensor clip = where(lt(factor, one), factor, one);
  // In place (copy_, not assign_): a gradient view must stay in its flat buffer, where the
  // optimizer and the data-parallel buckets read it.
  for (const Tensor& g : grads) g.copy_(g * cast(clip, g.dtype()));
  return norm.reshape({});
}

}  // namespace ft
