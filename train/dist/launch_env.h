// Where this process sits in a data-parallel run, read from the launcher's environment:
// torchrun's RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT, else SLURM's
// SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (the master from MASTER_ADDR / MASTER_PORT, as
// SLURM scripts export them for torchrun too), else OpenMPI's OMPI_COMM_WORLD_RANK / _SIZE /
// _LOCAL_RANK. None of them: a single process.
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
  bool distributed() const { return world_size > 1; }
};

/// Reads the environment through `get` (getenv by default: tests pass their own). Inconsistent
/// values (a rank outside [0, world size), a world size below 1, a non-numeric port) are an
/// ft::Error naming the variable.
LaunchEnv launch_env_from(const std::function<const char*(const char*)>& get);
LaunchEnv launch_env();

/// In a run of several processes, each takes the GPU of its local rank as its only visible device
/// (CUDA_VISIBLE_DEVICES: unset becomes LOCAL_RANK; a list becomes its LOCAL_RANK-th entry; one
/// entry, a launcher's own pinning, stays), so that every rank's "cuda" is its own GPU. Call
/// before the first CUDA call. Returns the GPU it picked, or "" when it left things as they were.
std::string pin_gpu_to_local_rank(const LaunchEnv& env);

}  // namespace ft
