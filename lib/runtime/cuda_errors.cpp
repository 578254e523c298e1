// The CUDA runtime's errors: CUDA, cuBLAS and launch failures turned into ft::Error (or
// OutOfMemory) with the call, the kernel and what to do about a sticky fault.
#include "lib/cuda/runtime.h"

#include <string>

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

}  // namespace ft::cuda
