// The kernel behind runtime::write_on_device and CapturedGraph's per-replay writes (lib/runtime.h).
#pragma once
#include <cuda_runtime.h>

#include "lib/runtime.h"

namespace ft::cuda {

/// Launches the kernel that does `writes` on the compute stream (captured when capturing).
void launch_device_writes(const DeviceWrites& writes);
/// Sets the arguments of `node` (a captured launch_device_writes) in `exec` to `writes`; replays
/// enqueued earlier keep theirs.
void set_device_writes(cudaGraphExec_t exec, cudaGraphNode_t node, const DeviceWrites& writes);

}  // namespace ft::cuda
