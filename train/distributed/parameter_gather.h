// ParameterGather: ZeRO-3's layer-by-layer gathering of the parameters (FSDP's unshard and
// reshard). Each rank keeps only its chunk of every bucket's parameter values (ParameterStore
// with DataPartition::shard_params); a layer's parameters exist whole only in one of two slots,
// each the size of the largest layer: layer i always uses slot i % 2.
//
// Forward: before layer i runs, its all-gather is waited for (issued now if it was not
// prefetched), and layer i + 1's is issued on the communication stream into the other slot,
// after the work of layer i - 1 that read it (the communicator orders every collective after the
// compute stream's work so far). Backward: an identity on each of layer i's outputs runs before
// any of the layer's backward, waits for its gather and issues layer i - 1's. A slot's layer is
// gathered again only when the slot held another or the parameters changed (ParameterStore's
// generation, and every step's start and end: a replayed graph updates them unseen by the
// host), so the last layer of a forward goes straight into its backward, and the first two
// layers of a backward into the next micro-batch's forward.
//
// Every step starts with no layer held, so the host logic is the same every step and the step
// stays capturable: the graph replays the same collectives into the same slots. Recomputation
// (--recompute) needs nothing more: a layer is recomputed inside its backward, after the
// identity has gathered it.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "layers/layer_gather.h"
#include "optim/parameter_store.h"
#include "train/distributed/communicator.h"

namespace ft {

class ParameterGather : public LayerGather {
 public:
  /// `store` shards the parameters (ZeRO-3); both must outlive it.
  ParameterGather(Communicator& comm, ParameterStore& store);
  ParameterGather(const ParameterGather&) = delete;
  ParameterGather& operator=(const ParameterGather&) = delete;

  void before_layer(size_t layer) override;
  Tensor after_layer(size_t layer, const Tensor& output) override;
  /// Forget what the slots hold (their layers are gathered again when next used): at every
  /// step's start (DataParallel::before_forward) and end, since a replayed step updates the
  /// parameters without the host seeing it.
  void reset();

 private:
  /// Slot s holds nothing: its gathering waited for, its layer's parameters pointed nowhere.
  void empty_slot(size_t s);
  /// Layer `layer` gathered in its slot, with the compute stream ordered after the gathering.
  void ensure(size_t layer);
  /// Layer `layer`'s gathering issued (not waited for), unless its slot holds it already.
  void prefetch(size_t layer);

  Communicator& comm_;
  ParameterStore& store_;
  std::array<Tensor, 2> slots_;
  std::array<int64_t, 2> holder_ = {-1, -1};  // the layer whose parameters each slot holds
  std::array<std::vector<std::unique_ptr<Work>>, 2> in_flight_;  // each slot's gathering, not yet waited for
  uint64_t generation_ = 0;                                       // the store's, when the holders were valid
};

}  // namespace ft
