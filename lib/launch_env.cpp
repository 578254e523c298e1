#include "lib/launch_env.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
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
  env.agent_store = env.launcher == "torchrun" && have("TORCHELASTIC_USE_AGENT_STORE") &&
                    std::strcmp(get("TORCHELASTIC_USE_AGENT_STORE"), "True") == 0;
  if (have("TORCHELASTIC_RESTART_COUNT"))
    env.restart_count = parse_int("TORCHELASTIC_RESTART_COUNT", get("TORCHELASTIC_RESTART_COUNT"));
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

GpuChoice gpu_for_local_rank(const char* visible, int local_rank) {
  if (!visible) return {std::to_string(local_rank), ""};
  std::vector<std::string> list;
  std::stringstream entries(visible);
  for (std::string item; std::getline(entries, item, ',');)
    if (!item.empty()) list.push_back(item);
  if (list.size() <= 1) return {};  // pinned already by the launcher (or no GPU at all)
  if (static_cast<size_t>(local_rank) >= list.size())
    return {"", "local rank " + std::to_string(local_rank) + " has no GPU in CUDA_VISIBLE_DEVICES='" + visible + "' (" +
                    std::to_string(list.size()) + " listed)"};
  return {list[static_cast<size_t>(local_rank)], ""};
}

namespace {

GpuPinning& pinning_state() {
  static GpuPinning state;
  return state;
}

// Runs when the library is loaded: before main, and (priority 101, the first a program may use)
// before the program's own static initializers, so that no CUDA call can come first. CUDA reads
// CUDA_VISIBLE_DEVICES once, when it starts; setting it later changes nothing. Nothing may throw
// here: a problem is kept for the runtime to raise at the first CUDA use.
__attribute__((constructor(101))) void pin_gpu_when_loaded() {
  GpuPinning& state = pinning_state();
  try {
    const char* opt_out = std::getenv("FT_PIN_GPU");
    if (opt_out && std::strcmp(opt_out, "0") == 0) return;
    const LaunchEnv env = launch_env();
    if (!env.distributed()) return;
    state.local_rank = env.local_rank;
    const GpuChoice choice = gpu_for_local_rank(std::getenv("CUDA_VISIBLE_DEVICES"), env.local_rank);
    state.problem = choice.problem;
    if (!choice.visible.empty()) {
      ::setenv("CUDA_VISIBLE_DEVICES", choice.visible.c_str(), 1);
      state.pinned = true;
    }
    if (const char* now = std::getenv("CUDA_VISIBLE_DEVICES")) state.visible = now;
  } catch (const std::exception& e) {
    state.problem = e.what();  // a malformed launch environment; launch_env() raises it again later
  }
}

}  // namespace

const GpuPinning& gpu_pinning() { return pinning_state(); }

}  // namespace ft
