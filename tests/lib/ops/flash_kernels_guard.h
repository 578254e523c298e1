// The attention tests' choice of flash kernels (lib/ops/attention/attention.h: set_flash_kernels)
// for a scope.
#pragma once
#include "lib/ops/attention/attention.h"

namespace ft::test {

/// Runs the fused path on one family of flash kernels for the guard's lifetime.
class FlashKernelsGuard {
 public:
  explicit FlashKernelsGuard(FlashKernels choice) : saved_(flash_kernels()) { set_flash_kernels(choice); }
  ~FlashKernelsGuard() { set_flash_kernels(saved_); }
  FlashKernelsGuard(const FlashKernelsGuard&) = delete;
  FlashKernelsGuard& operator=(const FlashKernelsGuard&) = delete;

 private:
  FlashKernels saved_;
};

}  // namespace ft::test
