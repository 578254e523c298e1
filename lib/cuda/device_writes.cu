// The device-writes kernel (lib/runtime.h, DeviceWrites): a step's batch copies and device values,
// or a log line's scalars, in one launch. Its arguments carry everything, so a captured node of it
// is re-pointed for each replay by setting its arguments: no upload, no work between two replays.
#include <algorithm>
#include <cstdint>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/device_writes.h"
#include "lib/cuda/runtime.h"
#include "lib/runtime.h"

namespace ft::cuda {

namespace {

constexpr int kThreads = 256;

struct InputTable {
  void* dst[DeviceWrites::kMaxCopies];
  const void* src[DeviceWrites::kMaxCopies];
  int64_t bytes[DeviceWrites::kMaxCopies];
  float* scalar_dst[DeviceWrites::kMaxScalars];
  float scalar_value[DeviceWrites::kMaxScalars];
  int copies, scalars;
};
static_assert(sizeof(InputTable) <= 4096, "the table must fit the kernel parameter space");

__global__ void device_writes_kernel(InputTable table) {
  begin_dependent_kernel();
  if (blockIdx.x == 0 && threadIdx.x < table.scalars) *table.scalar_dst[threadIdx.x] = table.scalar_value[threadIdx.x];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int c = 0; c < table.copies; ++c) {
    const int64_t bytes = table.bytes[c];
    const auto* src = static_cast<const unsigned char*>(table.src[c]);
    auto* dst = static_cast<unsigned char*>(table.dst[c]);
    // 16-byte words where both ends allow them (the pool's blocks do), bytes for the rest.
    const bool wide = (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0;
    const int64_t words = wide ? bytes / 16 : 0;
    for (int64_t i = first; i < words; i += stride)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    for (int64_t i = words * 16 + first; i < bytes; i += stride) dst[i] = src[i];
  }
}

InputTable table_of(const DeviceWrites& writes) {
  FT_CHECK(writes.copies.size() <= DeviceWrites::kMaxCopies && writes.scalars.size() <= DeviceWrites::kMaxScalars,
           "device writes: at most ", DeviceWrites::kMaxCopies, " copies and ", DeviceWrites::kMaxScalars,
           " values, got ", writes.copies.size(), " and ", writes.scalars.size());
  InputTable table{};
  table.copies = static_cast<int>(writes.copies.size());
  table.scalars = static_cast<int>(writes.scalars.size());
  for (int i = 0; i < table.copies; ++i) {
    table.dst[i] = writes.copies[i].dst;
    table.src[i] = writes.copies[i].src;
    table.bytes[i] = static_cast<int64_t>(writes.copies[i].bytes);
  }
  for (int i = 0; i < table.scalars; ++i) {
    table.scalar_dst[i] = writes.scalars[i].dst;
    table.scalar_value[i] = writes.scalars[i].value;
  }
  return table;
}

// Enough blocks for the largest copy's 16-byte words, at most a few waves; fixed at capture.
unsigned grid_of(const DeviceWrites& writes) {
  size_t largest = 0;
  for (const DeviceWrites::Copy& c : writes.copies) largest = std::max(largest, c.bytes);
  const size_t blocks = (largest / 16 + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, static_cast<size_t>(4 * multiprocessor_count())));
}

}  // namespace

void launch_device_writes(const DeviceWrites& writes) {
  // A plain launch: GraphedStep re-points this kernel's captured node for each replay by setting
  // its arguments, a path validated with plain nodes only.
  device_writes_kernel<<<grid_of(writes), kThreads, 0, stream()>>>(table_of(writes));
  FT_CUDA_CHECK_LAUNCH("device_writes_kernel");
}

void set_device_writes(cudaGraphExec_t exec, cudaGraphNode_t node, const DeviceWrites& writes) {
  cudaKernelNodeParams params{};
  FT_CUDA_CHECK(cudaGraphKernelNodeGetParams(node, &params));  // the captured grid and block
  InputTable table = table_of(writes);
  void* args[] = {&table};
  params.kernelParams = args;
  params.extra = nullptr;
  FT_CUDA_CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &params));
}

}  // namespace ft::cuda

namespace ft::runtime {
void write_on_device(const DeviceWrites& writes) {
  if (!writes.empty()) cuda::launch_device_writes(writes);
}
}  // namespace ft::runtime
