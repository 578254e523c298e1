#include "train/dist/launch_env.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "lib/error.h"

namespace ft {

namespace {

int parse_int(const char* name, const char* text) {
  int value = 0;
  const char* end = text + std::char_traits<char>::length(text);
  const auto [at, error] = std::from_chars(text, end, value);
  FT_CHECK(error == std::errc() && at == end, "launch environment: ", name, "='", text, "' is not an integer");
  return value;
}

}  // namespace

LaunchEnv launch_env_from(const std::function<const char*(const char*)>& get) {
  LaunchEnv env;
  auto have = [&](const char* name) { return get(name) != nullptr && *get(name) != '\0'; };
  // Which launcher: the first whose rank and size are both set. torchrun first: it also runs
  // inside SLURM allocations and under mpirun, and then its own variables are the right ones.
  struct Names {
    const char *launcher, *rank, *size, *local;
  };
  for (const Names& n : {Names{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                         Names{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
                         Names{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}}) {
    if (!have(n.rank) || !have(n.size)) continue;
    env.launcher = n.launcher;
    env.rank = parse_int(n.rank, get(n.rank));
    env.world_size = parse_int(n.size, get(n.size));
    env.local_rank = have(n.local) ? parse_int(n.local, get(n.local)) : env.rank;
    FT_CHECK(env.world_size >= 1, "launch environment: ", n.size, "=", env.world_size, " must be at least 1");
    FT_CHECK(env.rank >= 0 && env.rank < env.world_size, "launch environment: ", n.rank, "=", env.rank,
             " is outside [0, ", n.size, "=", env.world_size, ")");
    FT_CHECK(env.local_rank >= 0, "launch environment: ", n.local, "=", env.local_rank, " is negative");
    break;
  }
  if (have("MASTER_ADDR")) env.master_addr = get("MASTER_ADDR");
  if (have("MASTER_PORT")) {
    env.master_port = parse_int("MASTER_PORT", get("MASTER_PORT"));
    FT_CHECK(env.master_port > 0 && env.master_port < 65536, "launch environment: MASTER_PORT=", env.master_port,
             " is not a port");
  }
  for (const char* name : {"FT_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"})
    if (have(name)) {
      env.run_id = get(name);
      break;
    }
  // A process on its own (--data-parallel on without a launcher) meets nobody: its own id.
  if (env.run_id.empty() && env.launcher == "single") env.run_id = "single-" + std::to_string(::getpid());
  if (env.run_id.empty()) env.run_id = env.master_addr + "-" + std::to_string(env.master_port);
  return env;
}

LaunchEnv launch_env() {
  return launch_env_from([](const char* name) { return std::getenv(name); });
}

std::string pin_gpu_to_local_rank(const LaunchEnv& env) {
  if (!env.distributed()) return "";
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<std::string> list;
  if (visible) {
    std::stringstream entries(visible);
    for (std::string item; std::getline(entries, item, ',');)
      if (!item.empty()) list.push_back(item);
    if (list.size() <= 1) return "";  // pinned already (or no GPU at all)
    FT_CHECK(static_cast<size_t>(env.local_rank) < list.size(), "local rank ", env.local_rank,
             " has no GPU in CUDA_VISIBLE_DEVICES='", visible, "' (", list.size(), " listed)");
  }
  const std::string gpu = visible ? list[static_cast<size_t>(env.local_rank)] : std::to_string(env.local_rank);
  ::setenv("CUDA_VISIBLE_DEVICES", gpu.c_str(), 1);
  return gpu;
}

}  // namespace ft
