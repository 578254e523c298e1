// Whether launch_dependent lets kernels start early (lib/cuda/dependent_launch.cuh).
#include <cstdlib>
#include <string_view>

#include "lib/cuda/dependent_launch.cuh"

namespace ft::cuda {

namespace {

// Compiled like every library kernel: its PTX version says whether begin_dependent_kernel()
// holds the wait (sm_90 and later) or compiles to nothing (a build for an older architecture,
// even when it runs on an H100 by JIT).
__global__ void wait_probe_kernel() { begin_dependent_kernel(); }

}  // namespace

bool dependent_launch_enabled() {
  static const bool on = [] {
    const char* value = std::getenv("FT_DEPENDENT_LAUNCH");
    if (value && std::string_view(value) == "0") return false;
    if (compute_capability() < 90) return false;
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, wait_probe_kernel) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    // Launching early needs kernels that wait; a build whose kernels were compiled for an older
    // architecture has no wait in them, so they must keep plain stream order.
    return attributes.ptxVersion >= 90;
  }();
  return on;
}

}  // namespace ft::cuda
