// The runtime of a CPU-only build (FT_CUDA=OFF), beside the CUDA one (cuda_*.cpp): no GPU is reported,
// memory is plain host memory, and what needs a GPU (graphs, device copies) says so.
#include <cstdlib>
#include <cstring>

#include "lib/error.h"
#include "lib/runtime.h"

namespace ft {

bool cuda_available() { return false; }
CapturedGraph::CapturedGraph(const std::function<void()>&, const DeviceWrites*) {
  FT_FAIL("CapturedGraph: built without CUDA");
}
CapturedGraph::~CapturedGraph() = default;
void CapturedGraph::replay() { FT_FAIL("CapturedGraph: built without CUDA"); }
void CapturedGraph::replay(const DeviceWrites&) { FT_FAIL("CapturedGraph: built without CUDA"); }
void synchronize() {}
std::string device_name() { return ""; }
std::string device_identity() { return ""; }
StreamEvent::~StreamEvent() = default;
void StreamEvent::record(Stream) {}
void StreamEvent::wait(Stream) const {}
void StreamEvent::synchronize() const {}
bool capturing() { return false; }
size_t device_memory_in_use() { return 0; }
void reset_peak_memory() {}
void release_cached_memory() {}
void release_cached_memory_for_capture() {}
size_t device_memory_total() { return 0; }
size_t device_memory_free() { return 0; }
size_t peak_memory() { return 0; }
void profiler_start() {}
void profiler_stop() {}

namespace runtime {
void* allocate(size_t bytes, Device device) {
  FT_CHECK(device.is_cpu(), "fusedtrain was built without CUDA (FT_CUDA=OFF): cannot allocate on ", device.str());
  return allocate_host(bytes);
}
void release(void* ptr, Device) { std::free(ptr); }
void copy_bytes(void* dst, Device, const void* src, Device, size_t bytes) { std::memcpy(dst, src, bytes); }
void zero_bytes(void* dst, Device, size_t bytes) { std::memset(dst, 0, bytes); }
void* allocate_pinned(size_t bytes) { return allocate(bytes, kCPU); }
void release_pinned(void* ptr) { std::free(ptr); }
void copy_to_device_async(void*, const void*, size_t) { FT_FAIL("fusedtrain was built without CUDA (FT_CUDA=OFF)"); }
const void* device_error_word_address() { return nullptr; }
void write_on_device(const DeviceWrites& writes) {
  FT_CHECK(writes.empty(), "fusedtrain was built without CUDA (FT_CUDA=OFF): no device to write to");
}
}  // namespace runtime

}  // namespace ft
