// A communicator of world size 1 for in-process data-parallel tests: Gloo on the CPU (a file
// store in a folder of its own), NCCL on a GPU.
#pragma once
#include <unistd.h>

#include <memory>
#include <string>

#include "lib/launch_env.h"
#include "tests/train/temp_dir.h"
#include "train/distributed/communicator.h"

namespace ft::test {

// Each one of a process gets a port of its own (two may live at once).
struct OneRank {
  TempDir store{"ft_dp_test"};
  std::unique_ptr<Communicator> comm;
  explicit OneRank(Device device) {
    static int made = 0;
    LaunchEnv env;
    env.launcher = "torchrun";
    env.run_id = "dp-test-" + std::to_string(::getpid()) + "-" + store.path().filename().string();
    env.master_port = 20000 + static_cast<int>((::getpid() * 8 + made++) % 20000);
    comm = make_communicator(env, device, {.store_dir = store.path().string()});
  }
};

}  // namespace ft::test
