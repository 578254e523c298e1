// The CUDA device the process runs on: its context (the compute and copy streams, cuBLASLt, the
// device error word, its limits), built on first use, plus synchronization, events and the
// profiler range.
#include "lib/cuda/runtime.h"

#include <cuda_profiler_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "lib/launch_env.h"
#include "lib/runtime.h"

namespace ft::cuda {

namespace {

struct DeviceContext {
  cudaStream_t stream = nullptr;
  cudaStream_t copy_stream = nullptr;  // host-to-device uploads that overlap the compute stream
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 32u << 20;
  unsigned* error_word = nullptr;
  int sms = 0;
  size_t shared_per_sm = 0;
  int64_t l2_bytes = 0;
  int compute_capability = 0;

  DeviceContext() {
    int device = 0;
    FT_CUDA_CHECK(cudaGetDevice(&device));
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    // Keep freed blocks in the pool: the stream-ordered allocator then behaves as a caching
    // allocator, and allocations stay legal inside CUDA graph capture.
    cudaMemPool_t pool;
    FT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    FT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    FT_CUBLAS_CHECK(cublasLtCreate(&lt));
    FT_CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
    FT_CUDA_CHECK(cudaMalloc(&error_word, sizeof(unsigned)));
    FT_CUDA_CHECK(cudaMemset(error_word, 0, sizeof(unsigned)));
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    int shared = 0;
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    shared_per_sm = static_cast<size_t>(shared);
    int l2 = 0;
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    l2_bytes = l2;
    int major = 0, minor = 0;
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    compute_capability = 10 * major + minor;
  }
};

DeviceContext& context() {
  // Built on first use and deliberately never destroyed: tensors freed during static
  // destruction still need a live stream.
  static DeviceContext* ctx = [] {
    // A rank the library could not pin (lib/launch_env.h) stops before it takes a GPU that
    // another rank may be using.
    const GpuPinning& pinning = gpu_pinning();
    FT_CHECK(pinning.problem.empty(), "GPU selection: ", pinning.problem);
    return new DeviceContext();
  }();
  return *ctx;
}

}  // namespace

namespace {
thread_local cudaStream_t scoped_stream = nullptr;  // StreamScope's stream, when one is open
}  // namespace

cudaStream_t stream() { return scoped_stream ? scoped_stream : context().stream; }
StreamScope::StreamScope(cudaStream_t stream) : saved_(scoped_stream) { scoped_stream = stream; }
StreamScope::~StreamScope() { scoped_stream = saved_; }
cudaStream_t copy_stream() { return context().copy_stream; }
int multiprocessor_count() { return context().sms; }
size_t shared_memory_per_multiprocessor() { return context().shared_per_sm; }
int64_t l2_cache_bytes() { return context().l2_bytes; }
int compute_capability() { return context().compute_capability; }
cublasLtHandle_t cublaslt_handle() { return context().lt; }
void* cublaslt_workspace(size_t* bytes) {
  *bytes = context().workspace_bytes;
  return context().workspace;
}
unsigned* device_error_word() { return context().error_word; }

void check_device_errors() {
  unsigned word = 0;
  FT_CUDA_CHECK(cudaMemcpyAsync(&word, device_error_word(), sizeof(word), cudaMemcpyDeviceToHost, stream()));
  FT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  if (word == 0) return;
  FT_CUDA_CHECK(cudaMemsetAsync(device_error_word(), 0, sizeof(unsigned), stream()));
  // A bad target is named first: cross-entropy's twin then also gathers with it.
  if (word & kTargetOutOfRange) FT_FAIL("cross_entropy: a target id was out of range [0, V) (flagged on the device)");
  if (word & kIndexOutOfRange) FT_FAIL("gather: an index was out of range [0, rows) (flagged on the device)");
  if (word & kNormZeroWeight)
    FT_FAIL("layer_norm/rms_norm backward: a weight (gain) element is 0, so the normalized input cannot be taken "
            "from the saved output; that column's gradients are NaN (flagged on the device)");
  FT_FAIL("a kernel flagged device error code ", word);
}

ColumnScratch column_scratch(int64_t row_blocks, int64_t cols, int64_t col_tiles) {
  // Grows and never shrinks; the counters must start at zero, and each kernel leaves them so.
  static void* partials = nullptr;
  static size_t partial_bytes = 0;
  static unsigned* counters = nullptr;
  static size_t counter_count = 0;
  const size_t need = static_cast<size_t>(row_blocks * cols) * sizeof(float);
  if (need > partial_bytes) {
    if (partials) FT_CUDA_CHECK(cudaFreeAsync(partials, stream()));
    partial_bytes = std::max(need, partial_bytes * 2);
    FT_CUDA_CHECK(cudaMallocAsync(&partials, partial_bytes, stream()));
  }
  if (static_cast<size_t>(col_tiles) > counter_count) {
    if (counters) FT_CUDA_CHECK(cudaFreeAsync(counters, stream()));
    counter_count = std::max<size_t>(static_cast<size_t>(col_tiles), 1024);
    FT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&counters), counter_count * sizeof(unsigned), stream()));
    FT_CUDA_CHECK(cudaMemsetAsync(counters, 0, counter_count * sizeof(unsigned), stream()));
  }
  return ColumnScratch{static_cast<float*>(partials), counters};
}

unsigned elementwise_blocks(long long n, int threads) {
  long long blocks = (n + threads - 1) / threads;
  long long cap = static_cast<long long>(multiprocessor_count()) * 32;
  if (blocks > cap) blocks = cap;  // the kernels use grid-stride loops
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

}  // namespace ft::cuda

namespace ft {

bool cuda_available() {
  static const bool available = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return available;
}

void synchronize() {
  if (cuda_available()) cuda::check_device_errors();
}

std::string device_identity() {
  if (!cuda_available()) return "";
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  char bus_id[32] = {};
  FT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
  return device_name() + ", PCI " + bus_id;
}

std::string device_name() {
  if (!cuda_available()) return "";
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  FT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

namespace {
cudaStream_t stream_of(StreamEvent::Stream s) {
  return s == StreamEvent::Stream::Compute ? cuda::stream() : cuda::copy_stream();
}
}  // namespace

StreamEvent::~StreamEvent() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void StreamEvent::record(Stream stream) {
  if (!cuda_available()) return;
  if (!event_) {
    cudaEvent_t event = nullptr;
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    event_ = event;
  }
  FT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), stream_of(stream)));
}

void StreamEvent::wait(Stream stream) const {
  if (event_) FT_CUDA_CHECK(cudaStreamWaitEvent(stream_of(stream), static_cast<cudaEvent_t>(event_), 0));
}

void StreamEvent::synchronize() const {
  if (event_) FT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

bool capturing() {
  if (!cuda_available()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FT_CUDA_CHECK(cudaStreamIsCapturing(cuda::stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

void profiler_start() {
  if (cuda_available()) FT_CUDA_CHECK(cudaProfilerStart());
}
void profiler_stop() {
  if (!cuda_available()) return;
  FT_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));  // the marked work has run
  FT_CUDA_CHECK(cudaProfilerStop());
}

}  // namespace ft
