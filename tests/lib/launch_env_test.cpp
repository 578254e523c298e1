// The launch environment: torchrun's variables first, then SLURM's, then OpenMPI's; none is a
// single process; values that do not fit are errors naming the variable.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "lib/error.h"
#include "tests/lib/test_util.h"
#include "lib/launch_env.h"

namespace ft {
namespace {

LaunchEnv from(const std::map<std::string, std::string>& vars) {
  return launch_env_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  const LaunchEnv env = from({});
  EXPECT_EQ(env.launcher, "single");
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_FALSE(env.distributed());
}

TEST(LaunchEnv, TorchrunWinsOverSlurmAndOpenMpi) {
  const LaunchEnv env = from({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"},
                              {"MASTER_PORT", "29411"}, {"TORCHELASTIC_RUN_ID", "job42"}, {"SLURM_PROCID", "5"},
                              {"SLURM_NTASKS", "16"}, {"OMPI_COMM_WORLD_RANK", "6"}, {"OMPI_COMM_WORLD_SIZE", "9"}});
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "node7");
  EXPECT_EQ(env.master_port, 29411);
  EXPECT_EQ(env.run_id, "job42");
  EXPECT_TRUE(env.distributed());
}

TEST(LaunchEnv, SlurmThenOpenMpi) {
  const LaunchEnv slurm = from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"},
                                {"SLURM_JOB_ID", "777"}, {"OMPI_COMM_WORLD_RANK", "6"}, {"OMPI_COMM_WORLD_SIZE", "9"}});
  EXPECT_EQ(slurm.launcher, "slurm");
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.world_size, 16);
  EXPECT_EQ(slurm.local_rank, 1);
  EXPECT_EQ(slurm.run_id, "777");
  const LaunchEnv mpi = from({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(mpi.launcher, "openmpi");
  EXPECT_EQ(mpi.rank, 2);
  EXPECT_EQ(mpi.world_size, 4);
  EXPECT_EQ(mpi.local_rank, 0);
  EXPECT_EQ(mpi.run_id, "127.0.0.1-1234");  // no run id variable: the master's address and port
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  auto message = [](const std::map<std::string, std::string>& vars) {
    try {
      from(vars);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).find("RANK=4 is outside [0, WORLD_SIZE=4)"), std::string::npos);
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "4"}}).find("RANK='x' is not an integer"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0 must be at least 1"), std::string::npos);
  EXPECT_NE(message({{"MASTER_PORT", "70000"}}).find("MASTER_PORT=70000 is not a port"), std::string::npos);
}

TEST(LaunchEnv, EachRankGetsTheGpuOfItsLocalRank) {
  EXPECT_EQ(gpu_for_local_rank(nullptr, 2).visible, "2");
  EXPECT_EQ(gpu_for_local_rank("4,5,6,7", 2).visible, "6");
  EXPECT_EQ(gpu_for_local_rank("GPU-aa,GPU-bb", 1).visible, "GPU-bb");
  EXPECT_EQ(gpu_for_local_rank("6", 2).visible, "");  // one GPU listed: the launcher pinned it
  const GpuChoice none = gpu_for_local_rank("0,1", 2);
  EXPECT_EQ(none.visible, "");
  EXPECT_NE(none.problem.find("local rank 2 has no GPU in CUDA_VISIBLE_DEVICES='0,1'"), std::string::npos);
}

TEST(LaunchEnv, TorchrunsAgentStoreAndRestartCount) {
  const LaunchEnv env = from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                              {"TORCHELASTIC_RESTART_COUNT", "3"}});
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.restart_count, 3);
  EXPECT_FALSE(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}}).agent_store);
  EXPECT_FALSE(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}}).agent_store);
}

// What a program linking the library sees: the probe's own static initializer reads
// CUDA_VISIBLE_DEVICES, and must already see the pinned value (the library pins when loaded).
std::string probe(const std::string& env) {
  const std::string command = "env -u CUDA_VISIBLE_DEVICES -u RANK -u WORLD_SIZE -u LOCAL_RANK " + env + " " +
                              FT_PINNING_PROBE + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  char buffer[256];
  while (pipe && std::fgets(buffer, sizeof(buffer), pipe)) out += buffer;
  if (pipe) ::pclose(pipe);
  return out;
}

TEST(LaunchEnv, TheLibraryPinsBeforeTheProgramsStaticInitializers) {
  EXPECT_EQ(probe("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1"), "static init: 1; pinned: 1 (1)\n");
  EXPECT_EQ(probe("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=3,5"), "static init: 5; pinned: 1 (5)\n");
  EXPECT_EQ(probe("OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=3,5"),
            "static init: 5; pinned: 1 (5)\n");
  EXPECT_EQ(probe("RANK=0 WORLD_SIZE=1 CUDA_VISIBLE_DEVICES=3,5"), "static init: 3,5; pinned: 0 ()\n");
  EXPECT_EQ(probe("FT_PIN_GPU=0 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1"), "static init: unset; pinned: 0 ()\n");
  const std::string bad = probe("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=0");
  EXPECT_EQ(bad, "static init: 0; pinned: 0 (0)\n");  // one GPU listed: the launcher's own pinning
  EXPECT_NE(probe("RANK=1 WORLD_SIZE=3 LOCAL_RANK=2 CUDA_VISIBLE_DEVICES=0,1").find("problem: local rank 2 has no GPU"),
            std::string::npos);
}

}  // namespace
}  // namespace ft
