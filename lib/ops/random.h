// Counter-based random numbers (Philox4x32-10) that are identical on the CPU and on CUDA.
#pragma once
#include "lib/tensor.h"

namespace ft {

/// f32 uniforms in [0, 1): element i is philox::uniform(seed, offset, i). No gradient.
Tensor philox_uniform(const Shape& shape, uint64_t seed, uint64_t offset, Device device = kCPU);

}  // namespace ft
