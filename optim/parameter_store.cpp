#include "optim/parameter_store.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include "lib/autograd.h"
#include "lib/error.h"

namespace ft {

namespace {

DType state_dtype_for(const std::vector<Tensor>& params) {
  for (const Tensor& p : params)
    if (p.dtype() == DType::F64) return DType::F64;
  return DType::F32;
}

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

const DataPartition& checked(const DataPartition& partition) {
  FT_CHECK(partition.world >= 1 && partition.rank >= 0 && partition.rank < partition.world, "Optimizer: rank ",
           partition.rank, " of a data-parallel world of ", partition.world);
  FT_CHECK(partition.bucket_bytes > 0, "Optimizer: the gradient bucket size must be positive, got ",
           partition.bucket_bytes, " bytes");
  FT_CHECK(partition.max_buckets > 0, "Optimizer: max_buckets must be positive, got ", partition.max_buckets);
  FT_CHECK(!partition.shard_grads || partition.shard_state,
           "Optimizer: ZeRO-2 (shard_grads) shards the optimizer state too: set shard_state");
  FT_CHECK(!partition.shard_params || partition.shard_grads,
           "Optimizer: ZeRO-3 (shard_params) shards the gradients too: set shard_grads and shard_state");
  FT_CHECK(!partition.shard_params || !partition.units.empty(),
           "Optimizer: ZeRO-3 (shard_params) gathers the parameters a layer at a time: give the layers as units");
  return partition;
}

// ZeRO-3's unit of each trainable parameter (-1: the root); empty without ZeRO-3.
std::vector<int> unit_ids(const std::vector<Tensor>& params, const DataPartition& partition) {
  if (!partition.shard_params) return {};
  std::map<const TensorImpl*, int> unit_of;
  for (size_t u = 0; u < partition.units.size(); ++u)
    for (const Tensor& t : partition.units[u]) unit_of.emplace(t.impl(), static_cast<int>(u));
  std::vector<int> ids;
  for (const Tensor& p : params) {
    const auto it = unit_of.find(p.impl());
    ids.push_back(it == unit_of.end() ? -1 : it->second);
  }
  return ids;
}

}  // namespace

ParameterStore::ParameterStore(const std::vector<Tensor>& params, DataPartition partition)
    : params_(trainable(params)),
      partition_(checked(partition)),
      grads_(params_, FlatLayout::kAlign * partition_.world, /*storage=*/!partition_.shard_grads,
             unit_ids(params_, partition_)),
      state_dtype_(state_dtype_for(params_)) {
  NoGradGuard no_grad;
  make_masters();
  if (shards_gradients()) grad_shards_ = allocate_state();
  make_pieces();
  if (shards_parameters()) {
    make_runs();
    return;
  }
  for (const Piece& p : pieces_)
    if (sharded() && p.master.defined()) p.master.copy_(p.value);
}

void ParameterStore::make_masters() {
  const FlatLayout& layout = grads_.layout();
  // Buckets in elements of f32 gradient (an f64 group's hold the same count, twice the bytes),
  // grown so that there are at most max_buckets.
  int64_t elements = 0;
  for (const FlatLayout::Group& group : layout.groups()) elements += group.size;
  const int64_t unit = FlatLayout::kAlign * partition_.world;  // buckets() rounds down to it
  const int64_t fewest = (elements + partition_.max_buckets - 1) / partition_.max_buckets;
  buckets_ = layout.buckets(std::max({int64_t{1}, partition_.bucket_bytes / 4, (fewest + unit - 1) / unit * unit}),
                            partition_.world);
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
    if (shards_parameters()) {
      // Nothing whole: the values and the masters are this rank's chunks (the master is the
      // value in an f32 group), filled by make_runs.
      gather_flats_.push_back(own ? Tensor() : Tensor::zeros({group.size / partition_.world}, param_dtype, group.device));
      master_flats_.push_back(Tensor());
    } else if (!sharded() || own) {
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
    for (size_t g = 0; g < master_flats_.size(); ++g) {
      if (!master_flats_[g].defined()) master_flats_[g] = compact[g];
      if (!gather_flats_[g].defined()) gather_flats_[g] = master_flats_[g];
    }
  }
}

void ParameterStore::make_pieces() {
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
      const Tensor grad = shards_gradients() ? grad_shards_[g].narrow(0, state_offset, n) : grads_.flat(g).narrow(0, lo, n);
      const Tensor value = gather_flats_[g].narrow(0, shards_parameters() ? state_offset : lo, n);
      pieces_.push_back(Piece{i, lo - slot.offset, grad, value,
                              group_owns_master_[g] ? Tensor() : master_flats_[g].narrow(0, state_offset, n), g,
                              state_offset});
    }
  }
}

void ParameterStore::make_runs() {
  const FlatLayout& layout = grads_.layout();
  for (const Piece& p : pieces_) {
    const Tensor& param = params_[p.param];
    const Tensor source = param.detach().reshape({param.numel()}).narrow(0, p.param_offset, p.value.numel());
    p.value.copy_(source);
    if (p.master.defined()) p.master.copy_(source);
  }
  // Runs: the buckets in layout order, merged while they follow each other within one unit.
  std::vector<size_t> order(buckets_.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(buckets_[a].group, buckets_[a].begin) < std::pair(buckets_[b].group, buckets_[b].begin);
  });
  for (size_t b : order) {
    const FlatLayout::Bucket& bucket = buckets_[b];
    if (runs_.empty() || runs_.back().group != bucket.group || runs_.back().unit != bucket.unit ||
        runs_.back().end != bucket.begin)
      runs_.push_back(Run{bucket.group, bucket.begin, bucket.begin, bucket.unit, {}, nullptr, Tensor()});
    runs_.back().end = bucket.end;
    runs_.back().buckets.push_back(b);
  }
  unit_runs_.assign(partition_.units.size(), runs_.size());
  for (size_t r = 0; r < runs_.size(); ++r) {
    Run& run = runs_[r];
    const FlatLayout::Group& group = layout.groups()[run.group];
    const DType dtype = params_[group.members.front()].dtype();
    if (run.unit < 0) {
      run.home = Tensor::zeros({run.size()}, dtype, group.device);
      run.storage = run.home.impl()->storage;
    } else {
      FT_CHECK(unit_runs_[run.unit] == runs_.size(), "Optimizer: ZeRO-3's layer ", run.unit, " is not one stretch ",
               "of the layout: a layer's trainable parameters must follow each other in the list and share a dtype");
      unit_runs_[run.unit] = r;
      run.storage = std::make_shared<Storage>(static_cast<size_t>(run.size()) * dtype_size(dtype), group.device, nullptr);
    }
    for (size_t i : group.members) {
      const FlatLayout::Slot& slot = layout.slot(i);
      if (slot.offset < run.begin || slot.offset >= run.end) continue;
      if (run.home.defined())
        run.home.narrow(0, slot.offset - run.begin, slot.numel()).copy_(params_[i].detach().reshape({slot.numel()}));
      TensorImpl* impl = params_[i].impl();
      impl->storage = run.storage;
      impl->byte_offset = static_cast<size_t>(slot.offset - run.begin) * dtype_size(dtype);
    }
  }
  for (size_t u = 0; u < unit_runs_.size(); ++u)
    FT_CHECK(unit_runs_[u] < runs_.size(), "Optimizer: ZeRO-3's layer ", u, " has no trainable parameter");
}

Tensor ParameterStore::value_chunk(size_t b) const {
  const FlatLayout::Bucket& bucket = buckets_.at(b);
  return gather_flats_[bucket.group].narrow(0, bucket.begin / partition_.world, bucket.size() / partition_.world);
}

void ParameterStore::place_run(size_t r, const Tensor& whole) const {
  const Run& run = runs_.at(r);
  FT_CHECK(!whole.defined() || (whole.numel() == run.size() && whole.nbytes() == run.storage->bytes),
           "ParameterStore::place_run: a buffer of ", whole.numel(), " elements for a run of ", run.size());
  run.storage->data = whole.defined() ? whole.data_ptr() : nullptr;
}

std::vector<Tensor> ParameterStore::gather_whole(bool gather) {
  std::vector<Tensor> wholes(runs_.size());
  for (size_t r = 0; r < runs_.size(); ++r) {
    const Run& run = runs_[r];
    if (run.unit < 0) continue;
    wholes[r] = Tensor::zeros({run.size()}, value_chunk(run.buckets.front()).dtype(), run.storage->device);
    if (gather) gather_run(run, wholes[r]);
    place_run(r, wholes[r]);
  }
  return wholes;
}

void ParameterStore::release_whole(const std::vector<Tensor>& wholes) {
  for (size_t r = 0; r < runs_.size(); ++r) {
    const Run& run = runs_[r];
    const Tensor& whole = run.unit < 0 ? run.home : wholes.at(r);
    for (size_t b : run.buckets) {
      const auto [first, last] = buckets_[b].chunk(partition_.rank, partition_.world);
      value_chunk(b).copy_(whole.narrow(0, first - run.begin, last - first));
    }
    if (run.unit >= 0) place_run(r, Tensor());
  }
  ++generation_;
}

std::vector<Tensor> ParameterStore::allocate_state() const {
  std::vector<Tensor> flats;
  const FlatLayout& layout = grads_.layout();
  for (size_t g = 0; g < layout.groups().size(); ++g) {
    const FlatLayout::Group& group = layout.groups()[g];
    flats.push_back(sharded() ? Tensor::zeros({group.size / partition_.world}, group.dtype, group.device)
                              : layout.allocate(g));
  }
  return flats;
}

Tensor ParameterStore::state_piece(const std::vector<Tensor>& flats, size_t k) const {
  const Piece& p = pieces_.at(k);
  return flats.at(p.group).narrow(0, p.state_offset, p.value.numel()).reshape(p.value.shape());
}

ShardCollectives& ParameterStore::collectives(const char* what) const {
  FT_CHECK(collectives_, "ParameterStore: a ZeRO-1 step ", what, " over the ranks, and it has no data-parallel ",
           "group (DataParallel sets it)");
  return *collectives_;
}

void ParameterStore::gather_chunks(const std::vector<Tensor>& whole, const char* what) const {
  ShardCollectives& comm = collectives(what);
  for (const FlatLayout::Bucket& bucket : buckets_) {
    const Tensor& flat = whole[bucket.group];
    if (!flat.defined()) continue;
    const auto [first, last] = bucket.chunk(partition_.rank, partition_.world);
    comm.gather(flat.narrow(0, first, last - first), flat.narrow(0, bucket.begin, bucket.size()));
  }
}

std::vector<Tensor> ParameterStore::whole(const std::vector<Tensor>* state) const {
  const std::vector<Tensor>& flats = state ? *state : master_flats_;
  if (!sharded()) return flats;
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

void ParameterStore::gather_parameters() {
  ++generation_;
  if (!shards_parameters()) {
    gather_chunks(gather_flats_, "gathers the parameters");
    return;
  }
  // ZeRO-3: the root's runs only; each layer is gathered where it is used.
  for (const Run& run : runs_)
    if (run.unit < 0) gather_run(run, run.home);
}

Tensor ParameterStore::bucket_in_run(size_t b, const Run& run, const Tensor& whole) const {
  const FlatLayout::Bucket& bucket = buckets_.at(b);
  return whole.narrow(0, bucket.begin - run.begin, bucket.size());
}

void ParameterStore::gather_run(const Run& run, const Tensor& whole) const {
  for (size_t b : run.buckets)
    collectives("gathers the parameters").gather(value_chunk(b), bucket_in_run(b, run, whole));
}

void ParameterStore::load_into(const std::vector<Tensor>& flats, size_t i, const Tensor& value) const {
  if (!sharded()) {
    grads_.layout().view(flats[grads_.layout().slot(i).group], i).copy_(value);
    return;
  }
  const Tensor flat_value = value.reshape({value.numel()});
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const Piece& p = pieces_[k];
    if (p.param != i) continue;
    state_piece(flats, k).copy_(flat_value.narrow(0, p.param_offset, p.value.numel()).reshape(p.value.shape()));
  }
}

int64_t ParameterStore::master_bytes() const {
  size_t bytes = 0;
  for (size_t g = 0; g < master_flats_.size(); ++g)
    if (!group_owns_master_[g] && master_flats_[g].defined()) bytes += master_flats_[g].nbytes();
  return static_cast<int64_t>(bytes);
}

void ParameterStore::load_master(size_t i, const Tensor& value) {
  const size_t g = grads_.layout().slot(i).group;
  if (shards_parameters()) {
    load_into(master_flats_, i, value);
    if (!group_owns_master_[g]) load_into(gather_flats_, i, value);
    // A layer's parameter outside a gathering has nowhere to go: its shard above is what counts.
    if (params_[i].impl()->storage->data) params_[i].copy_(value);
    ++generation_;
    return;
  }
  if (sharded() && !group_owns_master_[g]) load_into(master_flats_, i, value);
  else grads_.layout().view(master_flats_[g], i).copy_(value);
  if (!params_[i].shares_storage(master_flats_[g])) params_[i].copy_(value);
}

WholeParameters::WholeParameters(ParameterStore& store, bool gather) : store_(store) {
  if (store_.shards_parameters()) wholes_ = store_.gather_whole(gather);
}

WholeParameters::~WholeParameters() {
  if (!store_.shards_parameters()) return;
  try {
    store_.release_whole(wholes_);
  } catch (const std::exception& e) {  // a destructor may not throw; the device's error resurfaces
    std::fprintf(stderr, "WholeParameters: writing the parameters back into their shards failed: %s\n", e.what());
  }
}

}  // namespace ft
