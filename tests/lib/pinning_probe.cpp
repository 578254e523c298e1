// A program linking the library, for launch_env_test: its own static initializer (default
// priority) reads CUDA_VISIBLE_DEVICES, which the library must have pinned before it ran.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lib/launch_env.h"

namespace {
const std::string seen_by_static_init = std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset";
}  // namespace

int main() {
  const ft::GpuPinning& pinning = ft::gpu_pinning();
  std::printf("static init: %s; pinned: %d (%s)\n", seen_by_static_init.c_str(), pinning.pinned ? 1 : 0,
              pinning.visible.c_str());
  if (!pinning.problem.empty()) std::printf("problem: %s\n", pinning.problem.c_str());
  return 0;
}
