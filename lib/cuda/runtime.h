// CUDA side of the runtime: the one compute stream, the memory pool, checked calls and the
// device-side error flag. Included only by CUDA translation units.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "lib/error.h"
#include "lib/runtime.h"

namespace ft::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line);
/// What a failed launch check reports. A launch fails on its own for a bad configuration or
/// memory it cannot get, and the message names the kernel. An asynchronous fault of a kernel
/// that ran earlier (an illegal address, a trap, an assert) is sticky: every later check returns
/// it, so the message says where it was seen and that an earlier kernel caused it.
std::string launch_error_message(cudaError_t status, const char* kernel_name);
[[noreturn]] void throw_launch_error(cudaError_t status, const char* kernel_name, const char* file, int line);
/// Throws OutOfMemory: `what` failed, then what the device has free (memory_summary) and what to
/// try. Every out-of-memory report on CUDA goes through here.
[[noreturn]] void throw_out_of_memory(const std::string& what, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line);

/// The compute stream of the current device. Every op enqueues its work here.
cudaStream_t stream();
/// Within its scope, this thread's launchers enqueue on `stream` instead of the compute stream
/// (data parallelism casts gradients on its communication stream). Only launchers that allocate
/// nothing may run inside one: the pool's memory is ordered on the stream it was taken on.
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t saved_;
};
/// The stream host-to-device uploads go on (runtime::copy_to_device_async), ordered against the
/// compute stream by StreamEvent.
cudaStream_t copy_stream();
int multiprocessor_count();
/// Shared memory of one multiprocessor, in bytes (228 KB on the H100).
size_t shared_memory_per_multiprocessor();
/// The L2 cache, in bytes (50 MB on the H100).
int64_t l2_cache_bytes();
/// The current device's compute capability as 10·major + minor (90 on the H100 and H200).
int compute_capability();
cublasLtHandle_t cublaslt_handle();
/// A workspace for cuBLASLt, allocated once.
void* cublaslt_workspace(size_t* bytes);

unsigned* device_error_word();
/// Reads and clears the error word (synchronizes); throws ft::Error when a kernel flagged one.
void check_device_errors();

/// Scratch for kernels that sum columns across blocks: partials for `row_blocks × cols` floats
/// and `col_tiles` zeroed arrival counters, kept across launches (stream order makes sharing
/// safe; each kernel leaves the counters at zero).
struct ColumnScratch {
  float* partials;
  unsigned* counters;
};
ColumnScratch column_scratch(int64_t row_blocks, int64_t cols, int64_t col_tiles);

/// Whether launch_dependent (lib/cuda/dependent_launch.cuh) lets kernels start early: on sm_90
/// and later with kernels compiled for it (whose begin_dependent_kernel() holds the wait),
/// unless FT_DEPENDENT_LAUNCH=0 is in the environment (read once), which makes every launch a
/// plain one, for A/B timings and for ruling the overlap out when chasing a bug.
/// Defined in lib/cuda/dependent_launch.cu.
bool dependent_launch_enabled();

/// Grid size for an elementwise kernel of n items with `threads` per block.
unsigned elementwise_blocks(long long n, int threads);

/// "X GB free of Y GB on the device, Z GB held by fusedtrain's pool", for out-of-memory errors.
std::string memory_summary();

/// Called just before a write compute-sanitizer's initcheck cannot see: cuBLAS's TMA stores and
/// the bulk copy engine's copies out of shared memory (its version 2025.3 reports later reads of
/// such memory as uninitialized, tests/sanitizer/bulk_copy_probe.cu shows it, and its
/// millions of reports slow it tenfold). With FT_INITCHECK=1 in the environment (set by
/// scripts/device/run.sh sanitize for initcheck only) the range is cleared first by a memset, a write
/// initcheck does see; otherwise nothing happens. Whether these writers fill their whole output
/// is checked apart, by the suite run with FT_FILL_UNINITIALIZED=1.
void before_untracked_write(void* begin, size_t bytes);

}  // namespace ft::cuda

#define FT_CUDA_CHECK(expr)                                                           \
  do {                                                                                \
    cudaError_t ft_status_ = (expr);                                                  \
    if (ft_status_ != cudaSuccess) ::ft::cuda::throw_cuda_error(ft_status_, #expr, __FILE__, __LINE__); \
  } while (0)

#define FT_CUBLAS_CHECK(expr)                                                         \
  do {                                                                                \
    cublasStatus_t ft_status_ = (expr);                                               \
    if (ft_status_ != CUBLAS_STATUS_SUCCESS) ::ft::cuda::throw_cublas_error(ft_status_, #expr, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch just enqueued (configuration errors, and out of memory for a module or local
/// memory, surface here, not later); the error names the kernel (launch_error_message).
#define FT_CUDA_CHECK_LAUNCH(kernel_name)                                                            \
  do {                                                                                               \
    cudaError_t ft_status_ = cudaGetLastError();                                                     \
    if (ft_status_ != cudaSuccess) ::ft::cuda::throw_launch_error(ft_status_, kernel_name, __FILE__, __LINE__); \
  } while (0)
