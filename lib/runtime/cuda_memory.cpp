// Device memory: the stream-ordered pool (a caching allocator that graphs can capture), its
// statistics, page-locked host memory and copies between devices.
#include "lib/cuda/runtime.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lib/runtime.h"

namespace ft {

namespace {
cudaMemPool_t default_pool() {
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool;
  FT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}
size_t pool_attribute(cudaMemPoolAttr attr) {
  if (!cuda_available()) return 0;
  cuda::stream();  // the pool is configured with the context
  uint64_t value = 0;
  FT_CUDA_CHECK(cudaMemPoolGetAttribute(default_pool(), attr, &value));
  return static_cast<size_t>(value);
}
}  // namespace

size_t device_memory_in_use() { return pool_attribute(cudaMemPoolAttrUsedMemCurrent); }
namespace {
// Memory that CUDA graphs allocate (GraphedStep's activations and gradients) comes from the
// device's graph memory pool, not the default pool: a replayed step's peak adds the two
// high-water marks.
size_t graph_memory_high() {
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  uint64_t bytes = 0;  // cuuint64_t in the driver API
  FT_CUDA_CHECK(cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &bytes));
  return static_cast<size_t>(bytes);
}
// The default pool's high-water mark before the last capture, which reset it (the eager steps').
size_t peak_before_capture = 0;
}  // namespace

size_t peak_memory() {
  if (!cuda_available()) return 0;
  return std::max(peak_before_capture, pool_attribute(cudaMemPoolAttrUsedMemHigh) + graph_memory_high());
}
void reset_peak_memory() {
  if (!cuda_available()) return;
  peak_before_capture = 0;
  FT_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));  // frees still queued count until they run
  uint64_t zero = 0;  // the driver resets the high-water mark to the current use
  FT_CUDA_CHECK(cudaMemPoolSetAttribute(default_pool(), cudaMemPoolAttrUsedMemHigh, &zero));
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  uint64_t none = 0;
  FT_CUDA_CHECK(cudaDeviceSetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &none));
}

size_t device_memory_total() {
  if (!cuda_available()) return 0;
  size_t free_bytes = 0, total_bytes = 0;
  FT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

size_t device_memory_free() {
  if (!cuda_available()) return 0;
  size_t free_bytes = 0, total_bytes = 0;
  FT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const auto reserved = static_cast<size_t>(pool_attribute(cudaMemPoolAttrReservedMemCurrent));
  return free_bytes + (reserved > device_memory_in_use() ? reserved - device_memory_in_use() : 0);
}

void release_cached_memory() {
  if (!cuda_available()) return;
  cudaStreamSynchronize(cuda::stream());
  cudaGetLastError();
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGraphMemTrim(device);
  cudaMemPoolTrimTo(default_pool(), 0);
  cudaGetLastError();
}

void release_cached_memory_for_capture() {
  if (!cuda_available()) return;
  release_cached_memory();
  peak_before_capture = std::max(peak_before_capture, pool_attribute(cudaMemPoolAttrUsedMemHigh));
  uint64_t zero = 0;  // restarts at the current use
  FT_CUDA_CHECK(cudaMemPoolSetAttribute(default_pool(), cudaMemPoolAttrUsedMemHigh, &zero));
}

namespace cuda {

void before_untracked_write(void* begin, size_t bytes) {
  static const bool on = runtime::env_switch("FT_INITCHECK");
  if (on && bytes > 0) FT_CUDA_CHECK(cudaMemsetAsync(begin, 0, bytes, stream()));
}

std::string memory_summary() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return "free memory unknown";
  }
  using runtime::gigabytes;
  return detail::concat(gigabytes(static_cast<double>(free_bytes)), " free of ", gigabytes(static_cast<double>(total_bytes)),
                        " on the device, ", gigabytes(static_cast<double>(pool_attribute(cudaMemPoolAttrReservedMemCurrent))),
                        " held by fusedtrain's pool");
}

}  // namespace cuda

namespace runtime {

void* allocate(size_t bytes, Device device) {
  if (bytes == 0) bytes = 1;
  if (device.is_cpu()) return allocate_host(bytes);
  FT_CHECK(cuda_available(), "no CUDA device is available");
  void* p = nullptr;
  cudaError_t status = cudaMallocAsync(&p, bytes, cuda::stream());
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (status == cudaErrorMemoryAllocation && cudaStreamIsCapturing(cuda::stream(), &capturing) == cudaSuccess &&
      capturing == cudaStreamCaptureStatusNone) {
    // The pool keeps freed blocks for reuse, and a block larger than any of them (a model's flat
    // buffer) fails while the device's memory sits there in pieces: give them back, and try once more.
    cudaGetLastError();
    release_cached_memory();
    status = cudaMallocAsync(&p, bytes, cuda::stream());
  }
  if (status == cudaErrorMemoryAllocation)
    cuda::throw_out_of_memory(detail::concat("CUDA out of memory allocating ", gigabytes(static_cast<double>(bytes))),
                              __FILE__, __LINE__);
  FT_CUDA_CHECK(status);  // a sticky error from earlier work (an illegal address) fails it too, and is that error
  if (fill_uninitialized()) FT_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, cuda::stream()));
  return p;
}

void release(void* ptr, Device device) {
  if (device.is_cpu()) {
    std::free(ptr);
    return;
  }
  cudaFreeAsync(ptr, cuda::stream());  // never throws from a destructor path
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  FT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda::stream()));
  if (dst_device.is_cpu()) cuda::check_device_errors();
  else if (src_device.is_cpu()) FT_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));  // src may be pageable and temporary
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return;
  }
  FT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cuda::stream()));
}

void* allocate_pinned(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (!cuda_available()) return allocate(bytes, kCPU);
  void* p = nullptr;
  const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  FT_CHECK(status == cudaSuccess, "cannot allocate ", bytes, " bytes of page-locked host memory: ",
           cudaGetErrorString(status));
  return p;
}

void release_pinned(void* ptr) {
  if (!ptr) return;
  if (!cuda_available()) return release(ptr, kCPU);
  cudaFreeHost(ptr);  // never throws from a destructor path
}

const void* device_error_word_address() { return cuda::device_error_word(); }

void copy_to_device_async(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda::copy_stream()));
}

}  // namespace runtime
}  // namespace ft
