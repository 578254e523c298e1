// Data parallelism in a binary: launched by scripts/launch.sh, torchrun, srun or mpirun, the
// process joins its run (launch environment → communicator), takes rank 0's weights, and hands
// the Trainer a DataParallel; launched alone, nothing changes. --comm-timeout bounds every
// collective; --check-replicas verifies after each step that every rank holds the same weights.
#pragma once
#include <chrono>
#include <cstdio>
#include <memory>

#include "examples/common/cli.h"
#include "train/batches.h"
#include "train/dist/communicator.h"
#include "train/dist/data_parallel.h"
#include "train/dist/launch_env.h"

namespace ft::cli {

inline void add_data_parallel_flags(Args& args) {
  args.flag("comm-timeout", "60", "seconds any collective of a data-parallel run may take before every rank stops\n"
                                  "with an error naming the rank it waited for");
  args.flag("check-replicas", "0", "1: after every step, check that all ranks hold bit-identical weights (costs a\n"
                                   "broadcast of the weights a step)");
}

/// This process's part in a data-parallel run; empty (a single process) without a launcher.
struct DataParallelRun {
  LaunchEnv env;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<DataParallel> dp;
  BatchShard shard() const { return {env.rank, env.world_size}; }
  bool primary() const { return env.rank == 0; }
  /// For Trainer::Options::data_parallel.
  DataParallel* get() const { return dp.get(); }
};

/// Joins the run `env` describes (launch_env()) when it has several processes, broadcasts rank
/// 0's weights and returns it; a single process gets an empty DataParallelRun.
inline DataParallelRun start_data_parallel(const Args& args, const std::string& program, const LaunchEnv& env,
                                           Device device, Module& model, Optimizer& optimizer) {
  DataParallelRun run;
  run.env = env;
  if (!run.env.distributed()) return run;
  const double timeout_s = args.number("comm-timeout");
  FT_CHECK(timeout_s > 0, program, ": --comm-timeout must be positive, got ", timeout_s);
  run.comm = make_communicator(run.env, device,
                               {.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))});
  run.dp = std::make_unique<DataParallel>(*run.comm, optimizer,
                                          DataParallel::Options{.check_replicas = args.integer("check-replicas") != 0});
  run.dp->broadcast_parameters(model);
  if (run.primary())
    std::printf("%s: data parallel over %d processes (%s; %s variables)\n", program.c_str(), run.env.world_size,
                run.comm->backend().c_str(), run.env.launcher.c_str());
  return run;
}

}  // namespace ft::cli
