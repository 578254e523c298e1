#include "lib/kernel_mode.h"

#include <cstdlib>

#include "lib/error.h"

namespace ft {

namespace {
KernelMode initial_mode() {
  const char* env = std::getenv("FT_KERNELS");
  return env && *env ? parse_kernel_mode(env) : KernelMode::Fused;
}
KernelMode& current() {
  static KernelMode mode = initial_mode();
  return mode;
}
}  // namespace

KernelMode kernel_mode() { return current(); }
void set_kernel_mode(KernelMode mode) { current() = mode; }

KernelMode parse_kernel_mode(const std::string& text) {
  if (text == "fused") return KernelMode::Fused;
  if (text == "unfused") return KernelMode::Unfused;
  FT_FAIL("unknown kernel mode '", text, "': expected fused or unfused (FT_KERNELS or --kernels)");
}

const char* kernel_mode_name(KernelMode mode) { return mode == KernelMode::Fused ? "fused" : "unfused"; }

KernelModeGuard::KernelModeGuard(KernelMode mode) : previous_(kernel_mode()) { set_kernel_mode(mode); }
KernelModeGuard::~KernelModeGuard() { set_kernel_mode(previous_); }

}  // namespace ft
