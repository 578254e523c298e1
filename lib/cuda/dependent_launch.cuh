// Programmatic dependent launch (Hopper, sm_90): a kernel launched with launch_dependent may be
// scheduled before the kernel ahead of it in the stream has finished, so its launch and its
// blocks' placement overlap that kernel's last wave and memory flush instead of following them
// (docs/design-notes.md has what it saves).
//
// The contract, for every kernel launched with launch_dependent:
//   - its first statement is begin_dependent_kernel(): every thread waits there until the
//     kernels before it have completed and their writes are visible (griddepcontrol.wait).
//     Nothing before it may read or write global memory, since the kernel before may still be
//     reading what this one writes (the memory pool hands freed buffers on in stream order).
//   - after waiting, it lets the next kernel launch early in its turn (launch_dependents).
// tests/scripts/dependent_launch_check.py holds every library kernel to the first point, however
// it is launched, so no kernel can be switched to launch_dependent without it. The one
// exception is a kernel that synchronizes with the one before it itself and defers the wait
// to its end (begin_overlapping_kernel, below; the attention's dQ finish).
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

/// The first statement of a kernel that overlaps the one before it instead of waiting for it:
/// it only lets the next kernel launch early. It may start once every block of the kernel
/// before it has started (each after its own wait, so the kernels before that one are done),
/// and then runs beside that kernel's last blocks. Such a kernel
///   - synchronizes with the kernel before it itself, through flags that kernel releases and it
///     acquires, for everything it reads of that kernel's;
///   - writes nothing that kernel reads or writes;
///   - calls end_overlapping_kernel() on every path before it exits, so that its completion
///     still implies that kernel's for the kernels after it (they wait only for this one).
/// tests/scripts/dependent_launch_check.py holds it to the last point as it can: the call is in
/// its body, and the body has no return.
__device__ __forceinline__ void begin_overlapping_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/// The wait an overlapping kernel defers (see begin_overlapping_kernel).
__device__ __forceinline__ void end_overlapping_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Launches kernel<<<grid, block, smem, stream()>>>(args...) allowed to start before the kernel
/// ahead of it has finished. `kernel` must begin with begin_dependent_kernel() or
/// begin_overlapping_kernel().
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
