// ParameterStore: the trainable parameters' flat storage, which the optimizer updates and data
// parallelism reduces. It owns the gradient buffer (lib/grad_buffer.h: each .grad() a view of it),
// the master weights in the same layout (an f32 or f64 parameter lives in its master buffer; a
// bf16 parameter keeps its storage, written from its f32 master after each update), the bucket
// plan of the data partition and, with ZeRO-1, this rank's chunks of every bucket ("pieces") and
// the collectives that gather them. One element offset names one parameter element in every
// buffer of the layout, so a contiguous range is a shard.
//
// Frozen parameters (requires_grad false) are left out: no gradient, no master. Build it (the
// optimizer builds it) after freezing and after Module::to, which replace what it points at.
#pragma once
#include <memory>
#include <vector>

#include "lib/grad_buffer.h"
#include "lib/tensor.h"

namespace ft {

/// How a data-parallel run divides the flat buffers (train/distributed/data_parallel.h). The
/// buffers of every rank get the same layout, padded so that each bucket splits into `world`
/// equal chunks; with `shard_state` (ZeRO-1) a rank keeps the master weights and moments of its
/// chunk of every bucket only, updates that chunk, and the step ends by gathering the updated
/// parameters from every rank.
struct DataPartition {
  int rank = 0;
  int world = 1;
  /// The size of a gradient bucket (the unit of reduction, and of ZeRO-1's shards), in bytes of
  /// gradient; each is rounded down to a multiple of FlatLayout::kAlign · world elements.
  int64_t bucket_bytes = int64_t{25} << 20;
  /// The most buckets a step reduces: where the gradients would make more, each bucket grows to
  /// 1/max_buckets of them. Every collective has a fixed cost in a captured step (about 0.45 ms
  /// on two H200s with NCCL's graph mixing support on): an 8B model's 1,226 buckets of 25 MB made
  /// its step 1,083 ms, and 62 of 500 MB made it 451 ms.
  int64_t max_buckets = 64;
  bool shard_state = false;
  /// ZeRO-2 (with shard_state): each bucket's gradients are reduce-scattered into this rank's
  /// shard of them as backward completes the bucket, and no rank keeps a whole gradient buffer
  /// (the parameters' own gradients, released once moved into a bucket, and two buckets' staging).
  bool shard_grads = false;
  /// ZeRO-3 (with shard_grads): the parameters too. A rank keeps its chunk of every bucket's
  /// values; each unit's parameters live in a buffer that data parallelism gathers them into
  /// around their layer's forward and backward (train/distributed/parameter_gather.h), the
  /// others (the root: embeddings, final norm, head) in buffers of their own, gathered after
  /// each step as ZeRO-1 gathers all.
  bool shard_params = false;
  /// ZeRO-3's units, in layer order: each a layer's parameters (CausalLM::layer_parameters());
  /// buckets never mix units, so a unit is a contiguous run of whole buckets.
  std::vector<std::vector<Tensor>> units = {};
};

/// The collectives a sharded (ZeRO-1) step runs, given by the data-parallel layer. Both are
/// ordered like the step's kernels (stream order on CUDA, done on return on the CPU).
class ShardCollectives {
 public:
  virtual ~ShardCollectives() = default;
  /// t = the sum of every rank's t, in place.
  virtual void sum(const Tensor& t) = 0;
  /// whole = every rank's chunk of it in rank order; `chunk` is this rank's part of `whole`.
  virtual void gather(const Tensor& chunk, const Tensor& whole) = 0;
};

class ParameterStore {
 public:
  /// ZeRO-3: where a contiguous stretch of buckets of one unit (a layer: one run; the root: one
  /// at each end of the layout) keeps its parameters whole. Its parameters view `storage` (at
  /// their offsets from `begin`): lent (data null until gathered) for a layer, the root's own
  /// buffer `home` otherwise.
  struct Run {
    size_t group = 0;
    int64_t begin = 0, end = 0;
    int unit = -1;
    std::vector<size_t> buckets;
    std::shared_ptr<Storage> storage;
    Tensor home;
    int64_t size() const { return end - begin; }
  };

  /// What an update covers: a parameter, or (sharded) the part of one in a chunk this rank owns.
  /// Unsharded, the views have the parameter's shape; sharded they are 1-D.
  struct Piece {
    size_t param = 0;           // index into params()
    int64_t param_offset = 0;   // its first element's index within the parameter
    Tensor grad;                // its gradient (reduced over the ranks by then)
    Tensor value;               // what the update writes: the parameter (bf16 or its own f32 master)
    Tensor master;              // f32 master of a bf16 parameter; undefined when `value` is the master
    size_t group = 0;
    int64_t state_offset = 0;   // where its state starts in allocate_state()'s buffer of its group
  };

  /// Takes the trainable parameters among `params` (at least one), attaches their gradient views
  /// and allocates the master weights.
  ParameterStore(const std::vector<Tensor>& params, DataPartition partition);
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  /// The trainable parameters, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  const DataPartition& partition() const { return partition_; }
  /// ZeRO-1 or 2 (at world size 1 too: the whole path, each chunk being the whole bucket).
  bool sharded() const { return partition_.shard_state; }
  /// ZeRO-2: the gradients live in this rank's shards (gradient_shards), filled by data parallelism.
  bool shards_gradients() const { return partition_.shard_grads; }
  /// ZeRO-3: the parameters live in this rank's shards; runs() say where they are gathered.
  bool shards_parameters() const { return partition_.shard_params; }
  const std::vector<Run>& runs() const { return runs_; }
  /// ZeRO-3: the run of unit u (a layer).
  size_t run_of_unit(size_t u) const { return unit_runs_.at(u); }
  size_t unit_count() const { return unit_runs_.size(); }
  /// ZeRO-3: this rank's chunk of bucket b's parameter values (an all-gather's input).
  Tensor value_chunk(size_t b) const;
  /// ZeRO-3: run r's parameters now live in `whole` ([run size] of their dtype; undefined: nowhere).
  void place_run(size_t r, const Tensor& whole) const;
  /// ZeRO-3: bucket b's part of `whole`, a buffer holding its run (b one of run.buckets): where
  /// the bucket's all-gather writes.
  Tensor bucket_in_run(size_t b, const Run& run, const Tensor& whole) const;
  /// Counts the updates of the parameters' values (each step, a load): a gathered copy made
  /// before the count last changed is stale.
  uint64_t generation() const { return generation_; }
  /// ZeRO-3, for reading or writing the model whole (checkpoints, export): every run's parameters
  /// gathered into a buffer of its own (a collective), or left as zeros when `gather` is false (a
  /// load that writes every parameter); release_whole copies this rank's chunks of what the
  /// parameters hold back into the shards and leaves the layers ungathered.
  std::vector<Tensor> gather_whole(bool gather);
  void release_whole(const std::vector<Tensor>& wholes);
  /// ZeRO-2's reduced gradients, one compact buffer per group laid out like allocate_state's:
  /// bucket [begin, end)'s chunk at begin / world.
  const std::vector<Tensor>& gradient_shards() const { return grad_shards_; }
  /// The flat gradient storage: its layout is also the layout of every state buffer.
  GradBuffer& grads() { return grads_; }
  const GradBuffer& grads() const { return grads_; }
  /// The gradient buckets of the partition, in the order backward completes them.
  const std::vector<FlatLayout::Bucket>& buckets() const { return buckets_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  /// The dtype of optimizer state: f64 when any parameter is f64, else f32.
  DType state_dtype() const { return state_dtype_; }

  /// A zeroed state buffer per gradient group, in the gradients' dtype (f32, or f64), for an
  /// optimizer's moments: the group's size, or sharded the size of this rank's chunks.
  std::vector<Tensor> allocate_state() const;
  /// Piece k's view of one of allocate_state()'s buffers (shaped like the piece's `value`).
  Tensor state_piece(const std::vector<Tensor>& flats, size_t k) const;
  /// Bytes of the f32 master weights kept beside the parameters (sharded: this rank's chunks).
  int64_t master_bytes() const;
  /// The buffers that hold every parameter's value, one per gradient group: the master weights
  /// (unsharded), or the parameters themselves (sharded: what the step gathers). Replicas of a
  /// data-parallel run hold them bit for bit alike.
  const std::vector<Tensor>& replica_buffers() const { return sharded() ? gather_flats_ : master_flats_; }

  /// A sharded store's collectives (DataParallel sets them; they must outlive the steps that use
  /// them); a sharded step without them is an ft::Error naming `what` needed them.
  void set_shard_collectives(ShardCollectives* collectives) { collectives_ = collectives; }
  ShardCollectives& collectives(const char* what) const;
  /// Sharded: every rank's updated chunk of the parameters, gathered into every rank's buffers.
  void gather_parameters();

  /// For checkpoints: whole-group buffers of `flats` (state from allocate_state, or the masters
  /// when null); sharded, gathered from every rank's chunks (a collective: every rank calls it).
  std::vector<Tensor> whole(const std::vector<Tensor>* flats = nullptr) const;
  /// Parameter i's whole value (a checkpoint's) into its place, or sharded its pieces, of `flats`.
  void load_into(const std::vector<Tensor>& flats, size_t i, const Tensor& value) const;
  /// Parameter i's master weights from a checkpoint; the parameter takes the value too (rounded
  /// to bf16 when it has a master of its own).
  void load_master(size_t i, const Tensor& value);

 private:
  void make_masters();
  void make_pieces();
  /// ZeRO-3: fills the value shards and masters from the parameters, then moves each parameter
  /// into its run.
  void make_runs();
  /// ZeRO-3: every bucket of `run` gathered into `whole`, in stream order (a collective).
  void gather_run(const Run& run, const Tensor& whole) const;
  /// Every bucket's chunks of `whole` (a buffer per group; undefined: skipped) gathered from
  /// every rank, in place.
  void gather_chunks(const std::vector<Tensor>& whole, const char* what) const;

  std::vector<Tensor> params_;
  DataPartition partition_;
  GradBuffer grads_;
  DType state_dtype_;
  std::vector<FlatLayout::Bucket> buckets_;
  std::vector<Piece> pieces_;
  // The master weights: whole groups unsharded, this rank's chunks sharded (an f32 parameter's
  // group stays whole: the parameters live in it). Sharded, gather_flats_ holds the parameters
  // of each group, which the step gathers: the f32 master group, or a bf16 copy of the layout.
  std::vector<Tensor> master_flats_, gather_flats_;
  std::vector<Tensor> grad_shards_;  // ZeRO-2 only
  std::vector<Run> runs_;             // ZeRO-3 only
  std::vector<size_t> unit_runs_;     // unit → its run
  uint64_t generation_ = 0;
  std::vector<bool> group_owns_master_;
  ShardCollectives* collectives_ = nullptr;
};

/// ZeRO-3: the model's parameters whole while it lives, to read or write the model as a whole
/// (checkpoints, export; a collective: every rank makes one), written back into this rank's
/// shards when it ends. `gather` false skips gathering, for a load that writes every parameter.
/// Without ZeRO-3 it does nothing.
class WholeParameters {
 public:
  explicit WholeParameters(ParameterStore& store, bool gather = true);
  ~WholeParameters();
  WholeParameters(const WholeParameters&) = delete;
  WholeParameters& operator=(const WholeParameters&) = delete;

 private:
  ParameterStore& store_;
  std::vector<Tensor> wholes_;
};

}  // namespace ft
