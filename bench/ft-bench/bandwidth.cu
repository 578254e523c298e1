// The copy is a kernel of our own, not cudaMemcpyAsync: on an H200 a device-to-device
// cudaMemcpyAsync of 1 GiB ran at 2.76 TB/s, below what the rope kernel reaches (3.3 TB/s), so
// it is no ceiling. Each thread keeps four 16-byte loads in flight before it stores them.
#include <cstdint>

#include "bench/ft-bench/bandwidth.h"
#include "bench/ft-bench/graph_timer.h"
#include "lib/cuda/runtime.h"
#include "lib/tensor.h"

namespace ft::bench {

namespace {

constexpr int kThreads = 256, kUnroll = 4;

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t chunks) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x; base < chunks;
       base += stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * blockDim.x < chunks) v[u] = src[base + u * blockDim.x];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * blockDim.x < chunks) dst[base + u * blockDim.x] = v[u];
  }
}

}  // namespace

double copy_bandwidth() {
  static const double measured = [] {
    // 1 GiB: twenty times the H200's 50 MB L2, so the copy runs at HBM's pace.
    constexpr int64_t kBytes = int64_t{1} << 30;
    const Tensor src = Tensor::full({kBytes / 2}, 1.0, DType::BF16, kCUDA);
    const Tensor dst = Tensor::empty(src.shape(), DType::BF16, kCUDA);
    const int64_t chunks = kBytes / 16;
    const unsigned blocks = static_cast<unsigned>(cuda::multiprocessor_count() * 8);
    const Timing t = time_device_work(
        [&] {
          copy_kernel<<<blocks, kThreads, 0, cuda::stream()>>>(static_cast<const uint4*>(src.data_ptr()),
                                                               static_cast<uint4*>(dst.data_ptr()), chunks);
          FT_CUDA_CHECK_LAUNCH("copy_kernel");
        },
        3, 20);
    return 2.0 * static_cast<double>(kBytes) / (t.graph_ms * 1e-3);
  }();
  return measured;
}

double percent_of_copy(double bytes_per_s) { return 100.0 * bytes_per_s / copy_bandwidth(); }

}  // namespace ft::bench
