// Division by a divisor fixed for a whole launch, as a multiply-high and a shift (Granlund and
// Montgomery, the form CUTLASS's FastDivmod uses): the magic number is worked out once on the
// host, so a kernel's grid-stride loop does not divide per element. A 64-bit `g / cols` cost
// about 25 instructions a group in the pointwise map loop (a branch into the 32-bit path, a
// reciprocal on the special-function unit, corrections), against 3 here.
#pragma once
#include <cstdint>

#include "lib/hostdevice.h"

namespace ft {

/// Largest dividend FastDivide takes.
constexpr int64_t kMaxFastDividend = 0x7fffffff;

/// n / divisor for 0 <= n <= kMaxFastDividend and divisor in [1, 2³¹).
struct FastDivide {
  uint32_t divisor = 1, magic = 0, shift = 0;

  FastDivide() = default;
  explicit FastDivide(uint32_t d) : divisor(d) {
    if (d == 1) return;  // magic 0: quotient() returns n
    uint32_t log2 = 0;   // ⌈log2 d⌉
    while ((1ull << log2) < d) ++log2;
    const uint32_t p = 31 + log2;
    magic = static_cast<uint32_t>(((1ull << p) + d - 1) / d);  // ⌈2^p / d⌉ < 2³²
    shift = p - 32;
  }

  FT_HOST_DEVICE uint32_t quotient(uint32_t n) const {
    if (magic == 0) return n;
#if defined(__CUDA_ARCH__)
    return __umulhi(n, magic) >> shift;
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32) >> shift;
#endif
  }
};

}  // namespace ft
