// The CUDA launchers of the Philox draws (random.cu).
// Compiled only in a CUDA build: callers reach these under `if constexpr (kCudaBuild)`
// (lib/kernel_mode.h), so a CPU-only build links without the .cu files.
#pragma once
#include <cstdint>

#include "lib/ops/random/random.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// out[i] = philox::uniform(seed, *offset, i), or philox::dropout_uniform with `dropout_bits`;
/// offset is a one-element i64 device tensor.
void philox_uniform(const Tensor& out, uint64_t seed, const Tensor& offset, bool dropout_bits);
/// used = *counter rounded up to a multiple of 8; *counter = used + step (one thread).
void philox_take(const Tensor& counter, const Tensor& used, uint64_t step);

}  // namespace ft::cuda
