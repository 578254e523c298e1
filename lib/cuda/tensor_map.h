// TMA descriptors (CUtensorMap) for the Hopper kernels, encoded on the host. The driver's
// encoder is fetched through the runtime (cudaGetDriverEntryPointByVersion), so the library
// does not link libcuda itself.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace ft::cuda {

/// A 4-D bf16 tensor, dims innermost first: sizes in elements, strides of dims 1.. in
/// elements; copied in boxes of `box` elements per dim, 128-byte swizzled (box[0] must be 64:
/// one 128-byte row), elements outside the tensor read as zeros.
struct TensorMapRequest {
  const void* base;
  int64_t sizes[4];
  int64_t strides[3];
  int box[4];
};

/// Whether TMA can address this tensor: a 16-byte aligned base and strides that are multiples
/// of 16 bytes (the kernels fall back to plain loads otherwise).
bool tensor_map_possible(const TensorMapRequest& request);
/// Encodes the map; throws ft::Error naming the field the driver refused.
CUtensorMap encode_tensor_map(const TensorMapRequest& request);

}  // namespace ft::cuda
