// Philox draws on the device: uniform (or dropout-bit) floats keyed on (seed, offset, element),
// and the per-step offset counter, read and advanced on the device so a graph replays it.
// The twin is the CPU loop in random.cpp, which draws the same numbers.
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/random/random_cuda.h"
#include "lib/philox.h"

namespace ft::cuda {

namespace {

__global__ void philox_uniform_kernel(float* out, int64_t n, uint64_t seed, const int64_t* offset_ptr,
                                      bool dropout_bits) {
  begin_dependent_kernel();
  const uint64_t offset = static_cast<uint64_t>(*offset_ptr);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = dropout_bits ? philox::dropout_uniform(seed, offset, static_cast<uint64_t>(i))
                          : philox::uniform(seed, offset, static_cast<uint64_t>(i));
}

__global__ void philox_take_kernel(int64_t* counter, int64_t* used, int64_t step) {
  begin_dependent_kernel();
  const int64_t at = philox::aligned_dropout_offset(*counter);
  *used = at;
  *counter = at + step;
}

}  // namespace

void philox_uniform(const Tensor& out, uint64_t seed, const Tensor& offset, bool dropout_bits) {
  const int64_t n = out.numel();
  launch_dependent(philox_uniform_kernel, elementwise_blocks(n, kThreads), kThreads, 0, out.data<float>(), n, seed,
                   offset.data<int64_t>(), dropout_bits);
  FT_CUDA_CHECK_LAUNCH("philox_uniform_kernel");
}

void philox_take(const Tensor& counter, const Tensor& used, uint64_t step) {
  launch_dependent(philox_take_kernel, 1, 1, 0, counter.data<int64_t>(), used.data<int64_t>(),
                   static_cast<int64_t>(step));
  FT_CUDA_CHECK_LAUNCH("philox_take_kernel");
}

}  // namespace ft::cuda
