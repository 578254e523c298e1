// Programmatic dependent launch (Hopper, sm_90): a kernel launched with launch_dependent may be
// scheduled before the kernel ahead of it in the stream has finished, so its launch and its
// blocks' placement overlap that kernel's last wave and memory flush instead of following them.
// Measured on the H100 (docs/design-notes.md): about 0.5 us a kernel boundary inside a CUDA
// graph, 1-3 us between eagerly launched kernels.
//
// The contract, for every kernel launched with launch_dependent:
//   - its first statement is begin_dependent_kernel(): every thread waits there until the
//     kernels before it have completed and their writes are visible (griddepcontrol.wait).
//     Nothing before it may read or write global memory, since the kernel before may still be
//     reading what this one writes (the memory pool hands freed buffers on in stream order).
//   - after waiting, it lets the next kernel launch early in its turn (launch_dependents).
// tests/scripts/dependent_launch_check.py holds every library kernel to the first point, however
// it is launched, so no kernel can be switched to launch_dependent without it.
// Waiting on completion is transitive: a kernel completes only after its own wait returned, so
// the wait covers every kernel before it, as plain stream order does. A kernel that waits but
// was launched without the attribute (by <<<>>>, or with FT_DEPENDENT_LAUNCH=0) just runs.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "lib/cuda/runtime.h"

namespace ft::cuda {

/// The first statement of a kernel launched by launch_dependent (see above).
__device__ __forceinline__ void begin_dependent_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Launches kernel<<<grid, block, smem, stream()>>>(args...) allowed to start before the kernel
/// ahead of it has finished. `kernel` must begin with begin_dependent_kernel().
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream();
  config.attrs = &attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  // cudaLaunchKernelEx converts the arguments implicitly, as <<<>>> does. Its error, if any, is
  // also the last error, which the caller's FT_CUDA_CHECK_LAUNCH reads.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace ft::cuda
