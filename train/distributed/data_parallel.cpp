#include "train/distributed/data_parallel.h"

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "train/distributed/sharded_tables.h"

namespace ft {

DataParallel::DataParallel(Communicator& comm, Optimizer& optimizer, Options options)
    : comm_(comm), optimizer_(optimizer), options_(options) {
  const DataPartition& partition = optimizer_.store().partition();
  FT_CHECK(partition.world == comm_.world_size() && partition.rank == comm_.rank(), "DataParallel: the optimizer ",
           "was built for rank ", partition.rank, " of ", partition.world, ", the communicator is rank ", comm_.rank(),
           " of ", comm_.world_size(), " (build it with the run's DataPartition)");
  const std::vector<FlatLayout::Bucket>& buckets = optimizer_.store().buckets();
  buckets_of_.resize(optimizer_.params().size());
  for (size_t b = 0; b < buckets.size(); ++b)
    for (size_t i : buckets[b].members) buckets_of_[i].push_back(b);
  hooked_ = optimizer_.params();
  for (size_t i = 0; i < hooked_.size(); ++i)
    hook_ids_.push_back(add_grad_ready_hook(hooked_[i], [this, i] { parameter_ready(i); }));
  if (optimizer_.sharded()) optimizer_.store().set_shard_collectives(this);
  if (optimizer_.store().shards_parameters()) gather_ = std::make_unique<ParameterGather>(comm_, optimizer_.store());
  if (optimizer_.store().shards_gradients()) {
    make_staging();
    return;
  }
  if (options_.reduce_dtype) {
    const GradBuffer& grads = optimizer_.store().grads();
    for (size_t g = 0; g < grads.groups(); ++g) {
      const Tensor& flat = grads.storage(g);
      wire_.push_back(*options_.reduce_dtype == flat.dtype()
                          ? Tensor()
                          : Tensor::empty({flat.numel()}, *options_.reduce_dtype, flat.device()));
    }
  }
}

void DataParallel::make_staging() {
  const ParameterStore& store = optimizer_.store();
  const std::vector<FlatLayout::Bucket>& buckets = store.buckets();
  const std::vector<FlatLayout::Group>& groups = store.grads().layout().groups();
  std::vector<int64_t> largest(groups.size(), 0);
  std::vector<std::vector<size_t>> of_group(groups.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    const size_t g = buckets[b].group;
    largest[g] = std::max(largest[g], buckets[b].size());
    slot_index_.push_back(static_cast<int>(of_group[g].size() % kSlots));
    previous_on_slot_.push_back(of_group[g].size() >= kSlots ? static_cast<int64_t>(of_group[g][of_group[g].size() - kSlots])
                                                             : -1);
    of_group[g].push_back(b);
  }
  slots_.resize(groups.size());
  slot_wires_.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    for (int k = 0; k < kSlots && largest[g] > 0; ++k) {
      slots_[g].push_back(Tensor::zeros({largest[g]}, groups[g].dtype, groups[g].device));
      if (options_.reduce_dtype && *options_.reduce_dtype != groups[g].dtype)
        slot_wires_[g].push_back(Tensor::empty({largest[g]}, *options_.reduce_dtype, groups[g].device));
    }
}

// The optimizer is not touched here: it may be gone already (a binary builds it after joining
// the run). The parameters are this object's own references.
DataParallel::~DataParallel() {
  // Only its own hooks: others on the same parameters (another wrapper's, a user's) stay.
  for (size_t i = 0; i < hooked_.size(); ++i) remove_grad_ready_hook(hooked_[i], hook_ids_[i]);
}

void DataParallel::broadcast_parameters(Module& model) {
  NoGradGuard no_grad;
  std::vector<std::unique_ptr<Work>> pending;
  // The optimizer state first (master weights included), then every tensor of the state dict:
  // parameters, frozen ones and buffers; each broadcast writes the buffer it is given. Sharded
  // (ZeRO-1), every chunk of the master weights and moments has one owner, so only the step
  // counts are sent: gathering the chunks whole to broadcast them would be a round trip that
  // changes nothing, and would hold the whole f32 state on every rank at once (96 GB for an 8B
  // model).
  const std::map<std::string, Tensor> state = optimizer_.sharded() ? optimizer_.step_counts() : optimizer_.state();
  for (const auto& [name, tensor] : state) pending.push_back(comm_.broadcast(tensor, 0));
  for (auto& work : pending) work->wait();
  broadcast_model(comm_, model);
  model_ = &model;
}

void broadcast_model(Communicator& comm, const Module& model) {
  NoGradGuard no_grad;
  std::vector<std::unique_ptr<Work>> pending;
  for (const auto& [name, tensor] : model.replicated_state_dict())
    if (tensor.impl()->storage->owned) pending.push_back(comm.broadcast(tensor, 0));
  for (auto& work : pending) work->wait();
}

void DataParallel::note(std::string event) {
  if (options_.trace) trace_.push_back(std::move(event));
}

void DataParallel::before_forward() {
  // ZeRO-3: every step starts with no layer held, whatever ran between steps (an evaluation
  // leaves layers in the slots): a captured step then gathers every layer it reads, and its
  // replays never read a layer an earlier replay's update made stale.
  if (gather_) gather_->reset();
  comm_.begin_timed_region();
}

void DataParallel::end_step() {
  if (gather_) gather_->reset();
  comm_.step_enqueued();
}

void DataParallel::before_backward(bool last) {
  if (!last) return;
  if (options_.check_replicas) check_replicas();
  armed_ = true;
  next_bucket_ = 0;
  waiting_.clear();
  const std::vector<FlatLayout::Bucket>& buckets = optimizer_.store().buckets();
  for (const FlatLayout::Bucket& b : buckets) waiting_.push_back(b.members.size());
  trace_.clear();
  if (optimizer_.store().shards_gradients()) {
    slot_taken_.assign(buckets.size(), false);
    waiting_copies_.assign(buckets.size(), {});
    bucket_work_.assign(buckets.size(), nullptr);
    parts_left_.clear();
    for (const std::vector<size_t>& of : buckets_of_) parts_left_.push_back(of.size());
    reached_.assign(buckets_of_.size(), false);
  }
}

void DataParallel::parameter_ready(size_t param) {
  if (!armed_) return;  // an earlier micro-batch of gradient accumulation: nothing to reduce yet
  const bool staged = optimizer_.store().shards_gradients();
  // Reached, but given no gradient (an op whose backward returns none for it): its view may
  // still hold last step's values. grad() zeroes a stale view, on the compute stream, before the
  // bucket's collective is ordered after it.
  if (!staged) (void)optimizer_.store().grads().grad(param);
  else reached_[param] = true;
  if (options_.trace) note("ready " + std::to_string(param));
  size_t ready_end = next_bucket_;
  for (size_t b : buckets_of_[param]) {
    --waiting_[b];
    if (!staged) continue;
    if (slot_taken_[b] || take_slot(b)) stage(param, b);
    else waiting_copies_[b].push_back(param);
  }
  while (ready_end < waiting_.size() && waiting_[ready_end] == 0) ++ready_end;
  start_buckets(ready_end);
}

void DataParallel::start_buckets(size_t end) {
  const std::vector<FlatLayout::Bucket>& buckets = optimizer_.store().buckets();
  const GradBuffer& grads = optimizer_.store().grads();
  for (; next_bucket_ < end; ++next_bucket_) {
    const FlatLayout::Bucket& b = buckets[next_bucket_];
    if (options_.trace) note("start " + std::to_string(next_bucket_));
    if (optimizer_.store().shards_gradients()) {
      pending_.push_back(reduce_staged(next_bucket_));
      bucket_work_[next_bucket_] = pending_.back().get();
      continue;
    }
    const Tensor& flat = grads.storage(b.group);
    const Tensor bucket = flat.narrow(0, b.begin, b.size());
    const Tensor wire = b.group < wire_.size() && wire_[b.group].defined()
                            ? wire_[b.group].narrow(0, b.begin, b.size())
                            : Tensor();
    if (optimizer_.sharded()) {
      const auto [first, last] = b.chunk(rank(), world_size());
      const Tensor chunk = flat.narrow(0, first, last - first);
      pending_.push_back(wire.defined() ? comm_.reduce_scatter_via(bucket, wire, chunk, CommOp::Average)
                                        : comm_.reduce_scatter(bucket, chunk, CommOp::Average));
    } else {
      pending_.push_back(wire.defined() ? comm_.all_reduce_via(bucket, wire, CommOp::Average)
                                        : comm_.all_reduce(bucket, CommOp::Average));
    }
  }
}

Tensor DataParallel::staging(size_t b) const {
  const FlatLayout::Bucket& bucket = optimizer_.store().buckets()[b];
  return slots_[bucket.group][static_cast<size_t>(slot_index_[b])].narrow(0, 0, bucket.size());
}

bool DataParallel::take_slot(size_t b) {
  if (const int64_t before = previous_on_slot_[b]; before >= 0) {
    // The bucket before it on this slot, and then its collective, must have used it first.
    Work* reading = bucket_work_[static_cast<size_t>(before)];
    if (!reading) return false;
    reading->wait();
  }
  slot_taken_[b] = true;
  // Zeros where no gradient lands: the layout's gaps, and parameters the backward does not reach.
  staging(b).fill_(0.0);
  for (size_t p : waiting_copies_[b]) stage(p, b);
  waiting_copies_[b].clear();
  return true;
}

void DataParallel::stage(size_t p, size_t b) {
  NoGradGuard no_grad;
  const ParameterStore& store = optimizer_.store();
  const FlatLayout::Bucket& bucket = store.buckets()[b];
  const FlatLayout::Slot& slot = store.grads().layout().slot(p);
  const Tensor& param = store.params()[p];
  const Tensor grad = param.grad();
  if (grad.defined()) {  // reached without a gradient: its part stays zero
    const int64_t lo = std::max(slot.offset, bucket.begin), hi = std::min(slot.offset + slot.numel(), bucket.end);
    staging(b).narrow(0, lo - bucket.begin, hi - lo).copy_(grad.reshape({grad.numel()}).narrow(0, lo - slot.offset, hi - lo));
  }
  FT_CHECK(parts_left_[p] > 0, "DataParallel: ZeRO-2 staged parameter ", p, " more often than it has buckets");
  if (--parts_left_[p] == 0) param.zero_grad();  // released: the bucket holds it now
}

std::unique_ptr<Work> DataParallel::reduce_staged(size_t b) {
  const ParameterStore& store = optimizer_.store();
  const FlatLayout::Bucket& bucket = store.buckets()[b];
  if (!slot_taken_[b]) FT_CHECK(take_slot(b), "DataParallel: ZeRO-2 bucket ", b, " found its slot in use");
  for (size_t p : waiting_copies_[b]) stage(p, b);
  waiting_copies_[b].clear();
  const Tensor input = staging(b);
  const Tensor shard = store.gradient_shards()[bucket.group].narrow(0, bucket.begin / world_size(),
                                                                   bucket.size() / world_size());
  if (slot_wires_[bucket.group].empty()) return comm_.reduce_scatter(input, shard, CommOp::Average);
  const Tensor wire = slot_wires_[bucket.group][static_cast<size_t>(slot_index_[b])].narrow(0, 0, bucket.size());
  return comm_.reduce_scatter_via(input, wire, shard, CommOp::Average);
}

void DataParallel::after_backward() {
  FT_CHECK(armed_, "DataParallel: after_backward without before_backward(last = true)");
  note("backward done");
  comm_.mark_computation_done();
  armed_ = false;
  if (optimizer_.store().shards_gradients()) {
    // A parameter this backward did not reach may hold gradients of earlier micro-batches: they
    // join its buckets, which cannot have started without it.
    for (size_t p = 0; p < reached_.size(); ++p)
      if (!reached_[p] && optimizer_.params()[p].grad().defined())
        for (size_t b : buckets_of_[p]) waiting_copies_[b].push_back(p);
  }
  // The buckets not started hold parameters this backward did not reach, whose views may still
  // be stale (last step's values): they become zeros first.
  optimizer_.store().grads().materialize();
  start_buckets(optimizer_.store().buckets().size());
  comm_.end_timed_region();
  for (auto& work : pending_) work->wait();
  pending_.clear();
}

void DataParallel::sum(const Tensor& t) { comm_.all_reduce(t, CommOp::Sum)->wait(); }

void DataParallel::gather(const Tensor& chunk, const Tensor& whole) { comm_.all_gather(chunk, whole)->wait(); }

std::function<void(Tensor&, Tensor&, Tensor&)> DataParallel::bag_exchange() { return replicated_bag_exchange(comm_); }

void DataParallel::average_over_ranks(const Tensor& value) { comm_.all_reduce(value, CommOp::Average)->wait(); }

double DataParallel::mean_over_ranks(double value) {
  const Tensor t = Tensor::full({1}, value, DType::F32, optimizer_.params().front().device());
  comm_.all_reduce(t, CommOp::Average)->wait();
  return t.item();
}

namespace {

// Every rank's `mine` equals rank 0's bit for bit, or an ft::Error names the first element that differs.
void check_same_as_rank0(Communicator& comm, const Tensor& mine_device, const std::string& what) {
  Tensor theirs = Tensor::empty(mine_device.shape(), mine_device.dtype(), mine_device.device());
  theirs.copy_(mine_device);
  comm.broadcast(theirs, 0)->wait();
  const Tensor mine = mine_device.to(kCPU), ref = theirs.to(kCPU);
  const size_t bytes = dtype_size(mine.dtype());
  const auto* a = static_cast<const unsigned char*>(mine.data_ptr());
  const auto* b = static_cast<const unsigned char*>(ref.data_ptr());
  for (int64_t i = 0; i < mine.numel(); ++i)
    FT_CHECK(std::memcmp(a + i * bytes, b + i * bytes, bytes) == 0, "data parallel: at step ", comm.step(), " rank ",
             comm.rank(), "'s ", what, " element ", i, " (", mine.to_vector()[i], ") differs from rank 0's (",
             ref.to_vector()[i], "): the replicas have diverged");
}

}  // namespace

void DataParallel::check_replicas() {
  NoGradGuard no_grad;
  const ParameterStore& store = optimizer_.store();
  if (store.shards_parameters()) {  // ZeRO-3: what every rank holds whole, the root's parameters
    for (const ParameterStore::Run& run : store.runs())
      if (run.unit < 0) check_same_as_rank0(comm_, run.home, "weights (outside the layers)");
  } else {
    const std::vector<Tensor>& replicas = store.replica_buffers();
    for (size_t g = 0; g < replicas.size(); ++g)
      check_same_as_rank0(comm_, replicas[g], "weights (group " + std::to_string(g) + ")");
  }
  // The model's own tensors too: tables trained outside the optimizer, buffers (not ZeRO-3's
  // layers, each rank's only as a shard).
  if (model_)
    for (const auto& [name, tensor] : model_->replicated_state_dict())
      if (tensor.impl()->storage->owned) check_same_as_rank0(comm_, tensor, name);
}

}  // namespace ft
