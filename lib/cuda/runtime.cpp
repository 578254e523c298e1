#include "lib/cuda/runtime.h"

#include <algorithm>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <cuda_profiler_api.h>

#include "lib/cuda/device_writes.h"
#include "lib/launch_env.h"
#include "lib/runtime.h"

namespace ft::cuda {

void throw_out_of_memory(const std::string& what, const char* file, int line) {
  cudaGetLastError();  // the failed call's error is reported here, not left for the next call
  throw OutOfMemory(detail::with_location(
      detail::concat(what, " (", memory_summary(), "): try a smaller --batch, or --graph 0 (a captured step holds its memory)"),
      file, line));
}

namespace {

std::string cuda_error_text(cudaError_t status) {
  return detail::concat("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

[[noreturn]] void throw_cuda_status(cudaError_t status, const std::string& what, const char* file, int line) {
  // Out of memory wherever CUDA reports it (a kernel's launch, a graph's upload or launch).
  if (status == cudaErrorMemoryAllocation) throw_out_of_memory(what, file, line);
  ::ft::detail::throw_error(what, file, line);
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  throw_cuda_status(status, detail::concat(cuda_error_text(status), " in ", expr), file, line);
}

namespace {

// The errors a kernel raises on the device, asynchronously, which then stick to the context.
bool is_sticky_fault(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string launch_error_message(cudaError_t status, const char* kernel_name) {
  const std::string error = cuda_error_text(status);
  if (!is_sticky_fault(status)) return detail::concat(error, " in the launch of ", kernel_name);
  return detail::concat(error, " seen at the launch of ", kernel_name,
                        ", but a kernel that ran before it faulted (this error is asynchronous and sticky); rerun with "
                        "CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer to find which");
}

void throw_launch_error(cudaError_t status, const char* kernel_name, const char* file, int line) {
  throw_cuda_status(status, launch_error_message(status, kernel_name), file, line);
}

void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  ::ft::detail::throw_error(::ft::detail::concat("cuBLAS error ", static_cast<int>(status), " in ", expr), file, line);
}

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
// device's graph memory pool, not the default pool: the peak adds the two high-water marks.
size_t graph_memory_high() {
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  uint64_t bytes = 0;  // cuuint64_t in the driver API
  FT_CUDA_CHECK(cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &bytes));
  return static_cast<size_t>(bytes);
}
}  // namespace

size_t peak_memory() {
  if (!cuda_available()) return 0;
  return pool_attribute(cudaMemPoolAttrUsedMemHigh) + graph_memory_high();
}
void reset_peak_memory() {
  if (!cuda_available()) return;
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

void release_cached_memory() {
  if (!cuda_available()) return;
  cudaStreamSynchronize(cuda::stream());
  cudaGetLastError();
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGraphMemTrim(device);
  cudaMemPoolTrimTo(default_pool(), 0);
  cudaGetLastError();
}

void profiler_start() {
  if (cuda_available()) FT_CUDA_CHECK(cudaProfilerStart());
}
void profiler_stop() {
  if (!cuda_available()) return;
  FT_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));  // the marked work has run
  FT_CUDA_CHECK(cudaProfilerStop());
}

namespace {
// The bytes the graph's allocation nodes ask for: what a launch must find free (at most; CUDA may
// reuse a freed block within the step).
size_t graph_allocation_bytes(cudaGraph_t graph) {
  size_t count = 0;
  FT_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  FT_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  size_t bytes = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    FT_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemAlloc) continue;
    cudaMemAllocNodeParams params{};
    FT_CUDA_CHECK(cudaGraphMemAllocNodeGetParams(node, &params));
    bytes += params.bytesize;
  }
  return bytes;
}

// A graph's own allocations are made when it is instantiated, uploaded or launched, so a step
// that ran eagerly can still not fit replayed: out of memory there says how much the graph asks
// for; any other failure is a CUDA error.
void check_graph_memory(cudaError_t status, const char* doing, size_t allocated_bytes) {
  if (status == cudaSuccess) return;
  if (status != cudaErrorMemoryAllocation) FT_CUDA_CHECK(status);
  cuda::throw_out_of_memory(detail::concat("CUDA out of memory ", doing, " the captured step: its graph allocates up to ",
                                           runtime::gigabytes(static_cast<double>(allocated_bytes)), " of its own"),
                            __FILE__, __LINE__);
}
}  // namespace

CapturedGraph::CapturedGraph(const std::function<void()>& work, const DeviceWrites* per_replay) {
  cudaStream_t s = cuda::stream();
  FT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    if (per_replay) {
      cuda::launch_device_writes(*per_replay);
      // The node just captured is the stream's one dependency now: the handle replays re-point.
      cudaStreamCaptureStatus status{};
      const cudaGraphNode_t* dependencies = nullptr;
      size_t count = 0;
      FT_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &dependencies, nullptr, &count));
      FT_CHECK(count == 1, "CapturedGraph: expected the device-writes kernel as the one dependency, got ", count);
      writes_node_ = dependencies[0];
    }
    work();
  } catch (const std::exception& e) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is reported here, not left for the next call
    const std::string message = detail::concat("CapturedGraph: the work could not be captured: ", e.what());
    if (dynamic_cast<const OutOfMemory*>(&e)) throw OutOfMemory(message);
    FT_FAIL(message);
  }
  FT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  allocated_bytes_ = graph_allocation_bytes(graph);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  if (status != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    if (status == cudaErrorMemoryAllocation) check_graph_memory(status, "instantiating", allocated_bytes_);
    FT_FAIL("CapturedGraph: cudaGraphInstantiate failed: ", cudaGetErrorString(status));
  }
  // Uploaded now, so the first replay does not pay for it (and a timed step does not either).
  // The upload maps the graph's own memory, so it is the first place that can run out.
  const cudaError_t uploaded = cudaGraphUpload(exec, s);
  if (uploaded != cudaSuccess) {  // no destructor runs for a constructor that throws
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    check_graph_memory(uploaded, "uploading", allocated_bytes_);
  }
  graph_ = graph;
  exec_ = exec;
}

CapturedGraph::~CapturedGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CapturedGraph::replay() {
  const cudaError_t status = cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), cuda::stream());
  check_graph_memory(status, "launching", allocated_bytes_);
}

void CapturedGraph::replay(const DeviceWrites& per_replay) {
  FT_CHECK(writes_node_ != nullptr, "CapturedGraph::replay: this graph was captured without per-replay writes");
  cuda::set_device_writes(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaGraphNode_t>(writes_node_), per_replay);
  replay();
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
