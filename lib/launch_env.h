// Where this process sits in a data-parallel run, read from the launcher's environment:
// torchrun's RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT, else SLURM's
// SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (the master from MASTER_ADDR / MASTER_PORT, as
// SLURM scripts export them for torchrun too), else OpenMPI's OMPI_COMM_WORLD_RANK / _SIZE /
// _LOCAL_RANK. None of them: a single process.
//
// It lives in lib/ because the runtime needs it before anything else: a rank of a run of several
// processes must see only its own GPU from the very first CUDA call, whoever makes it (a static
// initializer, the GEMM tuning cache, the allocator). The library pins it when it is loaded
// (GpuPinning below), before main and before the program's own static initializers.
#pragma once
#include <functional>
#include <string>

namespace ft {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// A name for this run shared by its processes (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, FT_RUN_ID,
  /// else the master's address and port; a process with no launcher: single-<pid>): it keeps two
  /// runs' rendezvous files apart.
  std::string run_id;
  /// "torchrun", "slurm", "openmpi" or "single".
  std::string launcher = "single";
  /// torchrun's agent hosts a TCPStore at MASTER_ADDR:MASTER_PORT that its workers share
  /// (TORCHELASTIC_USE_AGENT_STORE=True): the port is taken, and the store is the place to meet.
  bool agent_store = false;
  /// torchrun's restart count (TORCHELASTIC_RESTART_COUNT): keeps a restarted run's keys apart.
  int restart_count = 0;
  bool distributed() const { return world_size > 1; }
};

/// Reads the environment through `get` (getenv by default: tests pass their own). Inconsistent
/// values (a rank outside [0, world size), a world size below 1, a non-numeric port) are an
/// ft::Error naming the variable.
LaunchEnv launch_env_from(const std::function<const char*(const char*)>& get);
LaunchEnv launch_env();

/// The CUDA_VISIBLE_DEVICES a rank of local rank `local_rank` gets, given the launcher's
/// `visible` (null: unset): unset becomes the local rank; a list of several becomes its
/// local_rank-th entry; a single entry (a launcher's own pinning, SLURM's --gpus-per-task) stays.
/// `problem` is set instead when the list has no entry for the local rank.
struct GpuChoice {
  std::string visible;  // the value to set; empty: leave the variable as it is
  std::string problem;
};
GpuChoice gpu_for_local_rank(const char* visible, int local_rank);

/// What the library did when it was loaded, before main: in a run of several processes (a
/// launcher's variables say so) each process keeps only the GPU of its local rank visible, unless
/// FT_PIN_GPU=0 (for a program that picks its devices itself).
struct GpuPinning {
  bool pinned = false;       // CUDA_VISIBLE_DEVICES was set to `visible`
  std::string visible;       // CUDA_VISIBLE_DEVICES after the pinning (empty: unset)
  int local_rank = 0;
  std::string problem;       // why a rank could not be pinned (raised at the first CUDA use)
};
const GpuPinning& gpu_pinning();

}  // namespace ft
