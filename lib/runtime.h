// Device runtime entry points that do not expose CUDA headers: availability, sync, copies.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/dtype.h"
#include "lib/error.h"

namespace ft {

/// True when the library was built with CUDA and a GPU is visible.
bool cuda_available();
/// Waits for the compute stream and raises any error a kernel flagged on the device
/// (an out-of-range index, say). Explicit reads such as item() and to(CPU) call it.
void synchronize();

/// The name of the GPU the compute stream runs on, as its driver reports it ("NVIDIA H100 80GB
/// HBM3"); empty without one (a CPU-only build, or no GPU visible).
std::string device_name();
/// The GPU the compute stream runs on and where it sits: "NVIDIA H200, PCI 0000:19:00.0" (the
/// bus id tells apart GPUs of one model, whatever CUDA_VISIBLE_DEVICES renumbered); empty without one.
std::string device_identity();

/// True while work enqueued on the compute stream is being captured into a CUDA graph (what is
/// allocated then belongs to the graph and must not be kept past it).
bool capturing();

/// Bytes of device memory the library's tensors hold now (the pool's used memory, not its reserve).
size_t device_memory_in_use();
/// Bytes of memory the device has in all; 0 without a GPU.
size_t device_memory_total();
/// Bytes of device memory free now, plus what fusedtrain's pool holds unused; 0 without a GPU.
size_t device_memory_free();
/// Bytes of host memory available to a new allocation (/proc/meminfo's MemAvailable); 0 when
/// unknown.
size_t host_memory_available();
/// Restarts the high-water mark of device_memory_in_use() at the current value.
void reset_peak_memory();
/// After a failure (out of memory, say): waits for the queued work, ignoring its errors, and
/// gives the memory the pools keep cached (the default pool's and CUDA graphs') back to the device,
/// so that what runs next can use it.
void release_cached_memory();
/// Before capturing a CUDA graph (once per step shape): the default pool's cached blocks (the
/// eager steps' freed activations) go back to the device, where the graph's own pool can take
/// them, and the peak so far is set aside, so that peak_memory() counts the eager steps' peak or
/// the replayed ones', whichever is larger, not both.
void release_cached_memory_for_capture();
/// The most device memory in use since the last reset_peak_memory() (or the start): the
/// library's pool plus the memory CUDA graphs own (a replayed step's activations and gradients).
size_t peak_memory();

/// Brackets the work a profiler records when it starts with collection off (`ncu
/// --profile-from-start off`): ft-bench marks its timed steps so a profile leaves out set-up
/// and warm-up. No effect without a profiler attached, nor in CPU-only builds.
void profiler_start();
void profiler_stop();

/// Small writes done by one kernel: byte copies between device-accessible addresses (device
/// memory, or pinned host memory, which the GPU reaches directly) and f32 values written to
/// device addresses. A captured step takes its per-replay inputs this way (a batch from its
/// upload slot into the graph's fixed buffers, the learning rate): the kernel is the graph's
/// first node and each replay sets its arguments anew, so nothing runs between two replays. A
/// log line's scalars go to pinned memory the same way, in one launch. At most kMaxCopies
/// copies and kMaxScalars values.
struct DeviceWrites {
  static constexpr int kMaxCopies = 64, kMaxScalars = 8;
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  struct Scalar {
    float* dst;
    float value;
  };
  std::vector<Copy> copies;
  std::vector<Scalar> scalars;
  bool empty() const { return copies.empty() && scalars.empty(); }
};

/// Work enqueued on the compute stream, captured once into a CUDA graph and then replayed. The
/// work may allocate and free (the allocations become the graph's own memory, reused by every
/// replay) but must free, before it returns, everything it allocates; it must not synchronize
/// or copy from pageable host memory. Values that change between replays must be read from
/// device memory (the optimizers' step counts, the Philox offsets do) or be per-replay writes. A
/// capture that fails is an ft::Error naming the CUDA error. CPU-only builds throw.
class CapturedGraph {
 public:
  /// With `per_replay`, the graph starts with the device-writes kernel (captured with these), and
  /// every replay passes its own.
  explicit CapturedGraph(const std::function<void()>& work, const DeviceWrites* per_replay = nullptr);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  /// Enqueues one replay on the compute stream (asynchronous).
  void replay();
  /// Sets the device-writes node's arguments to `per_replay`, then enqueues one replay.
  void replay(const DeviceWrites& per_replay);
  /// What the graph's own allocations ask for in all (a replay that cannot find it is an
  /// OutOfMemory naming it).
  size_t allocated_bytes() const { return allocated_bytes_; }

 private:
  void* graph_ = nullptr;        // cudaGraph_t
  void* exec_ = nullptr;         // cudaGraphExec_t
  void* writes_node_ = nullptr;  // cudaGraphNode_t of the device-writes kernel, when captured
  size_t allocated_bytes_ = 0;
};

/// A point in the work of the compute stream or of the copy stream, the second stream that
/// carries host-to-device uploads (runtime::copy_to_device_async) beside the compute. Recording
/// one and waiting on it orders the two streams without the host waiting: the next batch's
/// upload then overlaps the current step. A CUDA event with timing off, made on first record;
/// without a GPU every call does nothing.
class StreamEvent {
 public:
  enum class Stream { Compute, Copy };
  StreamEvent() = default;
  ~StreamEvent();
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;
  /// Marks the work enqueued on `stream` so far (not allowed while capturing a graph).
  void record(Stream stream);
  /// Work enqueued on `stream` from now on starts after the marked work is done; the host does
  /// not wait. An event never recorded is passed at once.
  void wait(Stream stream) const;
  /// Blocks the calling thread (any thread) until the marked work is done.
  void synchronize() const;

 private:
  void* event_ = nullptr;  // cudaEvent_t
};

/// Whether this build has the CUDA kernels. Code that calls a CUDA launcher or a fused path sits
/// under `if constexpr (kCudaBuild)`: a CPU-only build then compiles no such call and links
/// without the .cu files, and every op falls back to its twin on its own (lib/kernel_mode.h).
#ifdef FT_WITH_CUDA
inline constexpr bool kCudaBuild = true;
#else
inline constexpr bool kCudaBuild = false;
#endif

namespace runtime {
/// Allocates device or host memory (host: 64-byte aligned; CUDA: the stream-ordered pool). Out of
/// memory is an OutOfMemory error naming the size and, on CUDA, what is free.
void* allocate(size_t bytes, Device device);
/// "12.34 GB": sizes in error messages.
inline std::string gigabytes(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  return text;
}
/// True when the environment variable `name` is set, and neither empty nor "0".
inline bool env_switch(const char* name) {
  const char* value = std::getenv(name);
  return value && *value && std::string_view(value) != "0";
}
/// With FT_FILL_UNINITIALIZED=1 in the environment, allocate fills every new allocation with
/// 0xFF bytes: NaN in every float dtype, -1 in the integer ones (PyTorch's
/// fill_uninitialized_memory does the same). A result that reads memory nothing wrote then turns
/// NaN instead of quietly plausible; scripts/device/run.sh sanitize runs the GPU suite so, because
/// compute-sanitizer's initcheck cannot see writes made by the bulk copy engine. For checking,
/// not speed: it costs a memset per allocation.
inline bool fill_uninitialized() {
  static const bool on = env_switch("FT_FILL_UNINITIALIZED");
  return on;
}
/// The host half of allocate (64-byte aligned, released with std::free).
inline void* allocate_host(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw OutOfMemory(detail::concat("out of host memory allocating ", gigabytes(static_cast<double>(bytes))));
  if (fill_uninitialized()) std::memset(p, 0xFF, bytes);
  return p;
}
void release(void* ptr, Device device);
/// Copies bytes between any two devices; returns once the destination is readable by the host
/// when the destination is the CPU, otherwise stays asynchronous on the compute stream.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
/// Sets bytes to zero (CUDA: one memset on the compute stream, asynchronous and capturable).
void zero_bytes(void* dst, Device device, size_t bytes);
/// Does `writes` (its copies and values) with one kernel on the compute stream; asynchronous
/// (a copy into pinned host memory is readable once a StreamEvent recorded after it has passed).
/// Nothing is launched for no writes. CPU-only builds throw.
void write_on_device(const DeviceWrites& writes);

/// Page-locked host memory (cudaHostAlloc): the GPU's copy engine reads it directly, so a copy
/// from it needs no staging copy and returns at once. Allocating it takes milliseconds and
/// releasing it waits for the device: allocate once and reuse. Ordinary host memory without a GPU.
void* allocate_pinned(size_t bytes);
void release_pinned(void* ptr);
/// Enqueues a copy of `bytes` from page-locked host memory `src` to device memory `dst` on the
/// copy stream and returns at once. Until a StreamEvent recorded on the copy stream after it has
/// passed, `src` must not be rewritten and `dst` not read (the compute stream waits on that event).
/// CPU-only builds throw.
void copy_to_device_async(void* dst, const void* src, size_t bytes);
/// The device address of the error word kernels flag bad data in (an unsigned; nonzero: the next
/// synchronize() raises the error), for staging it with write_on_device. Null without CUDA.
const void* device_error_word_address();
}  // namespace runtime

namespace cuda {
/// Codes kernels OR into the device error word; raised as ft::Error at the next synchronizing read.
enum DeviceErrorCode : unsigned { kIndexOutOfRange = 1u, kTargetOutOfRange = 2u, kNormZeroWeight = 4u };
}  // namespace cuda

}  // namespace ft
