// The launch environment: torchrun's variables first, then SLURM's, then OpenMPI's; none is a
// single process; values that do not fit are errors naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "lib/error.h"
#include "tests/lib/test_util.h"
#include "train/dist/launch_env.h"

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

TEST(LaunchEnv, EachRankIsPinnedToTheGpuOfItsLocalRank) {
  const char* before = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = before ? before : "";
  LaunchEnv env;
  env.world_size = 4;
  env.local_rank = 2;
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(pin_gpu_to_local_rank(env), "2");
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "2");
  ::setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7", 1);
  EXPECT_EQ(pin_gpu_to_local_rank(env), "6");
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "6");
  EXPECT_EQ(pin_gpu_to_local_rank(env), "");  // one GPU listed: pinned already
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  EXPECT_FT_ERROR(pin_gpu_to_local_rank(env), "local rank 2");
  env.world_size = 1;
  env.local_rank = 0;
  EXPECT_EQ(pin_gpu_to_local_rank(env), "");  // a single process: left alone
  if (before) ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else ::unsetenv("CUDA_VISIBLE_DEVICES");
}

}  // namespace
}  // namespace ft
