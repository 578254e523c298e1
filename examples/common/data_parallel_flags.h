// Data parallelism in a binary: launched by scripts/launch.sh, torchrun, srun or mpirun, the
// process joins its run (launch environment → communicator) before it builds its optimizer (whose
// flat buffers are padded and bucketed for the run's world size, and sharded with --zero 1),
// then takes rank 0's weights and hands the Trainer a DataParallel; launched alone, nothing
// changes. --comm-timeout bounds every collective; --check-replicas verifies before every step
// that every rank holds the same weights.
#pragma once
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "examples/common/cli.h"
#include "lib/launch_env.h"
#include "train/data/batches.h"
#include "train/distributed/communicator.h"
#include "train/distributed/data_parallel.h"

namespace ft::cli {

inline void add_data_parallel_flags(Args& args) {
  args.flag("data-parallel", "auto", "auto: data-parallel when launched with more than one process (scripts/launch.sh,\n"
                                     "torchrun, srun, mpirun); on: also as a single process (the whole path at world\n"
                                     "size 1)");
  args.flag("zero", "0", "1: ZeRO-1, each rank keeps and updates 1/N of the master weights and optimizer moments\n"
                         "(gradients reduce-scattered, parameters all-gathered); 2: ZeRO-2, also 1/N of the\n"
                         "gradients (each bucket reduce-scattered into its owner's shard as backward completes\n"
                         "it; no whole gradient buffer); 3 (ft-gpt2): ZeRO-3, also 1/N of the parameters (each\n"
                         "layer's gathered before its forward and again before its backward, the next one\n"
                         "prefetched meanwhile)");
  args.flag("bucket-mb", "25", "size of a gradient bucket, in MB of f32 gradient: each is averaged over the ranks as\n"
                               "soon as backward has completed it (grown so that a step has at most 64 buckets)");
  args.flag("grad-reduce", "f32", "f32 or bf16: the dtype gradients cross the wire in (bf16 halves the bytes: each rank's\n"
                                  "gradients rounded to bf16 and reduced in bf16, as llm.c does)");
  args.flag("comm-timeout", "60", "seconds any collective of a data-parallel run may take before every rank stops\n"
                                  "with an error naming the rank it waited for");
  args.flag("check-replicas", "0", "1: before every step, check that all ranks hold bit-identical weights (costs a\n"
                                   "broadcast of the weights a step)");
}

/// This process's part in a data-parallel run; empty (a single process) without a launcher.
struct DataParallelRun {
  LaunchEnv env;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<DataParallel> dp;
  /// For the optimizer's options: the world's padding and buckets, ZeRO-1.
  DataPartition partition;
  /// --grad-reduce: the dtype gradients cross the wire in, when not their own.
  std::optional<DType> reduce_dtype;
  BatchShard shard() const { return {env.rank, env.world_size}; }
  bool primary() const { return env.rank == 0; }
  /// For Trainer::Options::data_parallel.
  DataParallel* get() const { return dp.get(); }
};

/// Joins the run `env` describes (launch_env()) when it has several processes (or with
/// --data-parallel on): the communicator and the optimizer's partition. Call before building the
/// optimizer. A single process gets an empty DataParallelRun with the default partition.
/// `max_zero`: 3 where the model gathers its layers (ft-gpt2: CausalLM::set_layer_gather), else 2.
inline DataParallelRun join_data_parallel(const Args& args, const std::string& program, const LaunchEnv& env,
                                          Device device, int max_zero = 2) {
  DataParallelRun run;
  run.env = env;
  const std::string when = args.str("data-parallel");
  FT_CHECK(when == "auto" || when == "on", program, ": --data-parallel must be auto or on, got '", when, "'");
  const int64_t zero = args.integer("zero", 0);
  FT_CHECK(zero >= 0 && zero <= max_zero, program, ": --zero must be ", max_zero == 3 ? "0, 1, 2 or 3" : "0, 1 or 2",
           ", got ", zero, max_zero == 3 ? "" : " (ZeRO-3 gathers a language model's layers one at a time: ft-gpt2)");
  const std::string reduce = args.str("grad-reduce");
  FT_CHECK(reduce == "f32" || reduce == "bf16", program, ": --grad-reduce must be f32 or bf16, got '", reduce, "'");
  const double bucket_mb = args.number("bucket-mb", 0);
  FT_CHECK(bucket_mb > 0 && bucket_mb <= 1e6, program, ": --bucket-mb must be in (0, 1e6], got ", bucket_mb);
  // Checked whether or not this run is data-parallel: a flag is checked at the edge, always.
  const double timeout_s = args.number("comm-timeout");
  FT_CHECK(timeout_s > 0 && timeout_s <= 1e7, program, ": --comm-timeout must be in (0, 1e7] seconds, got ", timeout_s);
  (void)args.boolean("check-replicas");
  if (!run.env.distributed() && when != "on") {
    FT_CHECK(zero == 0, program, ": --zero ", zero, " needs a data-parallel run (a launcher, or --data-parallel on)");
    return run;
  }
  run.comm = make_communicator(run.env, device,
                               {.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))});
  if (reduce == "bf16") run.reduce_dtype = DType::BF16;
  run.partition = DataPartition{.rank = run.env.rank,
                                .world = run.env.world_size,
                                .bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20)),
                                .shard_state = zero >= 1,
                                .shard_grads = zero >= 2,
                                .shard_params = zero == 3};
  return run;
}

/// 0 to 3: how much of the training state `store` shards over the ranks.
inline int zero_level(const ParameterStore& store) {
  return store.shards_parameters() ? 3 : store.shards_gradients() ? 2 : store.sharded() ? 1 : 0;
}
inline const char* zero_name(const ParameterStore& store) {
  static const char* const names[] = {"", ", ZeRO-1", ", ZeRO-2", ", ZeRO-3"};
  return names[zero_level(store)];
}

/// ZeRO-3, before building the optimizer (which keeps only this rank's chunk of each parameter):
/// every rank takes rank 0's model, which DataParallel::broadcast_parameters cannot send later.
inline void broadcast_model(const DataParallelRun& run, Module& model) {
  if (run.comm) ft::broadcast_model(*run.comm, model);
}

/// After the optimizer (built with run.partition) and any checkpoint are loaded: the run's
/// DataParallel, with rank 0's weights and optimizer state on every rank.
inline void start_data_parallel(DataParallelRun& run, const Args& args, const std::string& program, Module& model,
                                Optimizer& optimizer) {
  if (!run.comm) return;
  run.dp = std::make_unique<DataParallel>(*run.comm, optimizer,
                                          DataParallel::Options{.check_replicas = args.boolean("check-replicas"),
                                                                .reduce_dtype = run.reduce_dtype});
  run.dp->broadcast_parameters(model);
  if (run.primary()) {
    std::printf("%s: data parallel over %d process%s (%s; %s variables), %zu gradient bucket%s reduced in %s%s\n",
                program.c_str(), run.env.world_size, run.env.world_size == 1 ? "" : "es", run.comm->backend().c_str(),
                run.env.launcher.c_str(), optimizer.store().buckets().size(), optimizer.store().buckets().size() == 1 ? "" : "s",
                run.reduce_dtype ? dtype_name(*run.reduce_dtype) : "f32",
                zero_name(optimizer.store()));
    // ZeRO-1's point is this figure: one rank's optimizer state against what a whole copy takes.
    const double mb = 1.0 / (1 << 20), state = static_cast<double>(optimizer.state_bytes());
    if (optimizer.sharded())
      std::printf("%s: optimizer state %.1f MB a rank (ZeRO-%d over %d ranks; unsharded about %.1f MB)\n",
                  program.c_str(), state * mb, zero_level(optimizer.store()), run.env.world_size,
                  state * mb * run.env.world_size);
    else
      std::printf("%s: optimizer state %.1f MB a rank (every rank holds all of it; --zero 1 shards it)\n",
                  program.c_str(), state * mb);
  }
}

/// After training, on rank 0: how the last step's collectives sat against its computation (timed
/// on the device; NCCL only), the figure that says whether the communication is hidden: the
/// gradient reduction, and any model-parallel exchange (the sharded tables') on a line of its own.
inline void print_communication_timing(const DataParallelRun& run, const std::string& program) {
  if (!run.comm || !run.primary()) return;
  for (const auto& [label, t] : run.comm->last_timing())
    std::printf("%s: %s in the last step: %d collectives, %.3f ms on the communication stream, %.3f ms of it with "
                "the computation waiting (%.0f%% hidden)\n",
                program.c_str(), label.empty() ? "gradient reduction" : label.c_str(), t.collectives, t.busy_ms,
                t.exposed_ms, 100.0 * t.hidden());
}

}  // namespace ft::cli
