// KernelMode: whether fused ops run their fused CUDA implementation or their composite twin.
//
// Read in exactly one place, each fused op's dispatch (use_fused()). The initial value comes
// from the environment variable FT_KERNELS=fused|unfused (default fused).
#pragma once
#include <string>

#include "lib/runtime.h"
#include "lib/tensor.h"

namespace ft {

enum class KernelMode { Fused, Unfused };

KernelMode kernel_mode();
void set_kernel_mode(KernelMode mode);
/// Parses "fused" or "unfused".
KernelMode parse_kernel_mode(const std::string& text);
const char* kernel_mode_name(KernelMode mode);

/// Sets the mode for its scope and restores the previous one after.
class KernelModeGuard {
 public:
  explicit KernelModeGuard(KernelMode mode);
  ~KernelModeGuard();
  KernelModeGuard(const KernelModeGuard&) = delete;
  KernelModeGuard& operator=(const KernelModeGuard&) = delete;

 private:
  KernelMode previous_;
};

/// The dispatch rule of every fused op: a CUDA build, fused mode and the data on CUDA.
inline bool use_fused(const Tensor& x) { return kCudaBuild && kernel_mode() == KernelMode::Fused && x.is_cuda(); }

}  // namespace ft
