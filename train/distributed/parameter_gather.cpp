#include "train/distributed/parameter_gather.h"

#include <algorithm>

#include "lib/autograd.h"
#include "lib/error.h"

namespace ft {

ParameterGather::ParameterGather(Communicator& comm, ParameterStore& store) : comm_(comm), store_(store) {
  FT_CHECK(store.shards_parameters(), "ParameterGather: the optimizer does not shard the parameters (ZeRO-3)");
  FT_CHECK(store.unit_count() > 0, "ParameterGather: no layers to gather");
  int64_t largest = 0;
  for (size_t u = 0; u < store.unit_count(); ++u)
    largest = std::max(largest, store.runs()[store.run_of_unit(u)].size());
  const Tensor sample = store.value_chunk(store.runs()[store.run_of_unit(0)].buckets.front());
  for (Tensor& slot : slots_) slot = Tensor::zeros({largest}, sample.dtype(), sample.device());
  generation_ = store.generation();
}

void ParameterGather::empty_slot(size_t s) {
  for (auto& work : in_flight_[s]) work->wait();  // a gathering never used: done before the slot is refilled
  in_flight_[s].clear();
  if (holder_[s] >= 0) store_.place_run(store_.run_of_unit(static_cast<size_t>(holder_[s])), Tensor());
  holder_[s] = -1;
}

void ParameterGather::reset() {
  for (size_t s = 0; s < slots_.size(); ++s) empty_slot(s);
}

void ParameterGather::prefetch(size_t layer) {
  if (store_.generation() != generation_) {  // updated since: every slot is stale
    reset();
    generation_ = store_.generation();
  }
  const size_t s = layer % slots_.size();
  if (holder_[s] == static_cast<int64_t>(layer)) return;
  empty_slot(s);
  const size_t r = store_.run_of_unit(layer);
  const ParameterStore::Run& run = store_.runs()[r];
  const Tensor region = slots_[s].narrow(0, 0, run.size());
  const Communicator::TimingLabel label(comm_, "ZeRO-3 parameter gathering");
  for (size_t b : run.buckets)
    in_flight_[s].push_back(comm_.all_gather(store_.value_chunk(b), store_.bucket_in_run(b, run, region)));
  store_.place_run(r, region);
  holder_[s] = static_cast<int64_t>(layer);
}

void ParameterGather::ensure(size_t layer) {
  prefetch(layer);
  for (auto& work : in_flight_[layer % slots_.size()]) work->wait();
  in_flight_[layer % slots_.size()].clear();
}

void ParameterGather::before_layer(size_t layer) {
  FT_CHECK(layer < store_.unit_count(), "ParameterGather: layer ", layer, " of a model the optimizer knows ",
           store_.unit_count(), " layers of");
  ensure(layer);
  if (layer + 1 < store_.unit_count()) prefetch(layer + 1);
}

Tensor ParameterGather::after_layer(size_t layer, const Tensor& output) {
  if (!needs_grad({&output})) return output;
  return record("zero3_gather", output.detach(), {output}, [this, layer](const Tensor& grad) {
    ensure(layer);
    if (layer > 0) prefetch(layer - 1);
    return std::vector<Tensor>{grad};
  });
}

}  // namespace ft
