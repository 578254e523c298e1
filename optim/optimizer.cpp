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

namespace {

const DataPartition& checked(const DataPartition& partition) {
  FT_CHECK(partition.world >= 1 && partition.rank >= 0 && partition.rank < partition.world, "Optimizer: rank ",
           partition.rank, " of a data-parallel world of ", partition.world);
  FT_CHECK(partition.bucket_bytes > 0, "Optimizer: the gradient bucket size must be positive, got ",
           partition.bucket_bytes, " bytes");
  return partition;
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr, StepPolicy policy, DataPartition partition)
    : params_(trainable(params)),
      policy_(policy),
      partition_(checked(partition)),
      grads_(params_, FlatLayout::kAlign * partition_.world),
      lr_(lr) {
  FT_CHECK(policy_.max_grad_norm >= 0, "Optimizer: max_grad_norm must be >= 0, got ", policy_.max_grad_norm);
  const DType dtype = state_dtype_for(params_);
  const Device device = params_.front().device();
  auto scalar = [&](double v) { return Tensor::full({1}, v, dtype, device); };
  state_ = StepState{scalar(lr), scalar(0), scalar(0), scalar(std::numeric_limits<double>::quiet_NaN()), scalar(1),
                     scalar(1)};
  const FlatLayout& layout = grads_.layout();
  // Buckets in elements of f32 gradient (an f64 group's hold the same count, twice the bytes).
  buckets_ = layout.buckets(std::max<int64_t>(1, partition_.bucket_bytes / 4), partition_.world);
  NoGradGuard no_grad;
  for (size_t g = 0; g < layout.groups().size(); ++g) {
    const FlatLayout::Group& group = layout.groups()[g];
    const DType param_dtype = params_[group.members.front()].dtype();
    bool own = true, mixed = false;
    for (size_t i : group.members) {
      own = own && params_[i].dtype() == group.dtype;
      mixed = mixed || params_[i].dtype() != param_dtype;
    }
    FT_CHECK(!sharded() || !mixed, "Optimizer: ZeRO-1 needs the parameters of one gradient group to share a dtype; ",
             "group ", g, " (", dtype_name(group.dtype), " gradients) mixes ", dtype_name(param_dtype), " and others");
    group_owns_master_.push_back(own);
    if (!sharded() || own) {
      master_flats_.push_back(layout.allocate(g));
      for (size_t i : group.members) {
        const Tensor view = layout.view(master_flats_[g], i);
        if (params_[i].dtype() == group.dtype) move_into(params_[i], view);
        else view.copy_(params_[i].detach());
      }
      gather_flats_.push_back(sharded() ? master_flats_[g] : Tensor());
    } else {
      // The bf16 parameters move into one buffer of the layout (gathered after each step); the f32
      // master holds this rank's chunks only, filled below from the pieces.
      gather_flats_.push_back(layout.allocate(g, param_dtype));
      for (size_t i : group.members) move_into(params_[i], layout.view(gather_flats_[g], i));
      master_flats_.push_back(Tensor());
    }
  }
  if (sharded()) {
    const std::vector<Tensor> compact = allocate_state();
    for (size_t g = 0; g < master_flats_.size(); ++g)
      if (!master_flats_[g].defined()) master_flats_[g] = compact[g];
  }
  make_pieces();
  for (const Piece& p : pieces_)
    if (sharded() && p.master.defined()) p.master.copy_(p.value);
}

void Optimizer::make_pieces() {
  const FlatLayout& layout = grads_.layout();
  if (!sharded()) {
    for (size_t i = 0; i < params_.size(); ++i) {
      const FlatLayout::Slot& slot = layout.slot(i);
      const bool own = params_[i].dtype() == layout.groups()[slot.group].dtype;
      pieces_.push_back(Piece{i, 0, layout.view(grads_.flat(slot.group), i), params_[i],
                              own ? Tensor() : layout.view(master_flats_[slot.group], i), slot.group, slot.offset});
    }
    return;
  }
  // This rank's chunk of every bucket, laid end to end in the compact state buffers in the order
  // of the buckets' positions: bucket [begin, end) has its chunk at begin / world.
  for (const FlatLayout::Bucket& bucket : buckets_) {
    const auto [first, last] = bucket.chunk(partition_.rank, partition_.world);
    const size_t g = bucket.group;
    const int64_t base = bucket.begin / partition_.world;
    for (size_t i : bucket.members) {
      const FlatLayout::Slot& slot = layout.slot(i);
      const int64_t lo = std::max(slot.offset, first), hi = std::min(slot.offset + slot.numel(), last);
      if (lo >= hi) continue;
      const int64_t n = hi - lo, state_offset = base + (lo - first);
      pieces_.push_back(Piece{i, lo - slot.offset, grads_.flat(g).narrow(0, lo, n), gather_flats_[g].narrow(0, lo, n),
                              group_owns_master_[g] ? Tensor() : master_flats_[g].narrow(0, state_offset, n), g,
                              state_offset});
    }
  }
}

int64_t Optimizer::state_bytes() const {
  size_t bytes = 0;
  for (size_t g = 0; g < master_flats_.size(); ++g)
    if (!group_owns_master_[g] && master_flats_[g].defined()) bytes += master_flats_[g].nbytes();
  for (const auto& [name, flats] : state_buffers())
    for (const Tensor& t : *flats)
      if (t.defined()) bytes += t.nbytes();
  return static_cast<int64_t>(bytes);
}

std::vector<Tensor> Optimizer::allocate_state() const {
  std::vector<Tensor> flats;
  const FlatLayout& layout = grads_.layout();
  for (size_t g = 0; g < layout.groups().size(); ++g) {
    const FlatLayout::Group& group = layout.groups()[g];
    flats.push_back(sharded() ? Tensor::zeros({group.size / partition_.world}, group.dtype, group.device)
                              : layout.allocate(g));
  }
  return flats;
}

Tensor Optimizer::state_piece(const std::vector<Tensor>& flats, size_t k) const {
  const Piece& p = pieces_.at(k);
  return flats.at(p.group).narrow(0, p.state_offset, p.value.numel()).reshape(p.value.shape());
}

ShardCollectives& Optimizer::collectives(const char* what) const {
  FT_CHECK(collectives_, "Optimizer: a ZeRO-1 optimizer ", what, " over the ranks, and it has no data-parallel ",
           "group (DataParallel sets it)");
  return *collectives_;
}

void Optimizer::gather_chunks(const std::vector<Tensor>& whole, const char* what) const {
  ShardCollectives& comm = collectives(what);
  for (const FlatLayout::Bucket& bucket : buckets_) {
    const Tensor& flat = whole[bucket.group];
    if (!flat.defined()) continue;
    const auto [first, last] = bucket.chunk(partition_.rank, partition_.world);
    comm.gather(flat.narrow(0, first, last - first), flat.narrow(0, bucket.begin, bucket.size()));
  }
}

std::vector<Tensor> Optimizer::gathered(const std::vector<Tensor>& flats) const {
  const FlatLayout& layout = grads_.layout();
  // A buffer that covers its whole group already (an f32 group's masters: the parameters; any
  // buffer at world size 1) is taken as it is; the others' chunks go to their places, then the
  // other ranks' are gathered around them.
  std::vector<Tensor> whole(flats.size()), to_gather(flats.size());
  for (size_t g = 0; g < flats.size(); ++g) {
    if (flats[g].numel() == layout.groups()[g].size) {
      whole[g] = flats[g];
      continue;
    }
    whole[g] = to_gather[g] = layout.allocate(g, flats[g].dtype());
    for (const FlatLayout::Bucket& bucket : buckets_) {
      if (bucket.group != g) continue;
      const auto [first, last] = bucket.chunk(partition_.rank, partition_.world);
      whole[g].narrow(0, first, last - first).copy_(flats[g].narrow(0, bucket.begin / partition_.world, last - first));
    }
  }
  gather_chunks(to_gather, "gathers its state");
  return whole;
}

void Optimizer::gather_parameters() { gather_chunks(gather_flats_, "gathers the parameters"); }

void Optimizer::scatter_into(const std::vector<Tensor>& flats, size_t i, const Tensor& value) const {
  const Tensor flat_value = value.reshape({value.numel()});
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const Piece& p = pieces_[k];
    if (p.param != i) continue;
    state_piece(flats, k).copy_(flat_value.narrow(0, p.param_offset, p.value.numel()).reshape(p.value.shape()));
  }
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
  for (const Piece& p : pieces_) touched.insert(touched.end(), {p.grad, p.value, p.master});
  if constexpr (kCudaBuild) return use_fused(params_.front()) && multi_tensor::fused_supported(touched, state_dtype());
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
  const FlatLayout& layout = grads_.layout();
  std::map<std::string, Tensor> out;
  auto add = [&](const std::string& name, const std::vector<Tensor>& whole) {
    for (size_t i = 0; i < params_.size(); ++i)
      out[std::to_string(i) + "." + name] = layout.view(whole[layout.slot(i).group], i);
  };
  if (sharded()) {
    // An f32 group's masters are the parameters, whole on every rank; a bf16 group's are chunks.
    add("master", gathered(master_flats_));
    for (const auto& [name, flats] : state_buffers()) add(name, gathered(*flats));
  } else {
    add("master", master_flats_);
    for (const auto& [name, flats] : state_buffers()) add(name, *flats);
  }
  out["applied"] = state_.applied;
  out["skipped"] = state_.skipped;
  return out;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& state) {
  NoGradGuard no_grad;
  const FlatLayout& layout = grads_.layout();
  auto find = [&](size_t i, const std::string& name) {
    const std::string key = std::to_string(i) + "." + name;
    auto it = state.find(key);
    FT_CHECK(it != state.end(), "Optimizer::load_state: missing '", key, "'");
    FT_CHECK(it->second.shape() == params_[i].shape(), "Optimizer::load_state: '", key, "' has shape ",
             shape_str(it->second.shape()), ", expected ", shape_str(params_[i].shape()));
    return it->second.to(params_[i].device());
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const size_t g = layout.slot(i).group;
    for (const auto& [name, flats] : state_buffers()) {
      const Tensor value = find(i, name);
      if (sharded()) scatter_into(*flats, i, value);
      else layout.view((*flats)[g], i).copy_(value);
    }
    const Tensor master = find(i, "master");
    // The parameter takes the master's value (rounded to bf16 when it has its own master).
    if (sharded() && !group_owns_master_[g]) scatter_into(master_flats_, i, master);
    else layout.view(master_flats_[g], i).copy_(master);
    if (!params_[i].shares_storage(master_flats_[g])) params_[i].copy_(master);
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
  // reads the flat buffers whole (their gaps hold zeros), not one tensor per parameter; sharded,
  // this rank's reduced chunks, and the sum of squares is added up over the ranks.
  const bool need_norm = policy_.max_grad_norm > 0 || policy_.skip_nonfinite;
  std::vector<Tensor> grads;
  std::function<void(const Tensor&)> sum_across;
  if (need_norm && sharded()) {
    ShardCollectives& comm = collectives("adds its gradient norm up");
    for (const Piece& p : pieces_) grads.push_back(p.grad);
    sum_across = [&comm](const Tensor& t) { comm.sum(t); };
  } else if (need_norm) {
    grads = grads_.flats();
  }
  if (!fused_for(grads.empty() ? std::vector<Tensor>{params_.front()} : grads, state_dtype()))
    settle_step_twin(grads, state_, policy_, sum_across);
  else if constexpr (kCudaBuild)
    multi_tensor::settle_step(grads, state_, policy_, sum_across);
  norm_computed_ = need_norm;
  update();
  if (sharded()) gather_parameters();
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
