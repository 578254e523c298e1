// Philox4x32-10 (Salmon et al., SC'11), shared by the CPU and CUDA paths so that both draw
// identical bits.
//
// Counter layout: element i of a draw keyed on (seed, offset) uses the block counter
// {(offset + i) / 4 low, high, 0, 0} and takes lane (offset + i) % 4. Offsets are reserved in
// multiples of 4 (Generator::advance), so the mask depends only on (seed, offset, i): never on
// grid, block size or vector width.
#pragma once
#include <cmath>
#include <cstdint>

#include "lib/hostdevice.h"

namespace ft::philox {

struct Uint4 {
  uint32_t x, y, z, w;
};

FT_HOST_DEVICE uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
#if defined(__CUDA_ARCH__)
  // As two 32-bit halves: from the 64-bit product the compiler kept an add of a zero high word
  // per multiply (two extra instructions a round) in the dropout kernels.
  *hi = __umulhi(a, b);
  return a * b;
#else
  uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
#endif
}

FT_HOST_DEVICE Uint4 philox4x32_10(Uint4 counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(kM0, counter.x, &hi0);
    uint32_t lo1 = mulhilo(kM1, counter.z, &hi1);
    counter = Uint4{hi1 ^ counter.y ^ key0, lo1, hi0 ^ counter.w ^ key1, lo0};
    key0 += kW0;
    key1 += kW1;
  }
  return counter;
}

/// Four 32-bit random words for counter block `block`.
FT_HOST_DEVICE Uint4 block_bits(uint64_t seed, uint64_t block) {
  Uint4 counter{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

FT_HOST_DEVICE uint32_t lane(const Uint4& bits, unsigned index) {
  return index == 0 ? bits.x : index == 1 ? bits.y : index == 2 ? bits.z : bits.w;
}

/// Uniform float in [0, 1) from the top 24 bits: exact in f32 and identical everywhere.
FT_HOST_DEVICE float to_uniform(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

/// The draw's keep test, to_uniform(bits) >= p, as one integer compare (`bits >= threshold`) for
/// p in [0, 1): to_uniform(b) is (b >> 8)·2⁻²⁴ exactly, so it holds exactly when (b >> 8) >=
/// ⌈p·2²⁴⌉ (an integer against a real), that is when b >= ⌈p·2²⁴⌉·2⁸. p·2²⁴ is exact in f32 and
/// below 2²⁴ for p < 1, so the threshold fits 32 bits. The float compare costs a shift, a
/// conversion, a multiply and a compare per element, a quarter of the dropout kernels' work
/// besides Philox itself.
FT_HOST_DEVICE uint32_t keep_threshold(float p) { return static_cast<uint32_t>(ceilf(p * 16777216.0f)) << 8; }

/// The uniform number of element i of the draw keyed on (seed, offset).
FT_HOST_DEVICE float uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t counter = offset + i;
  return to_uniform(lane(block_bits(seed, counter >> 2), static_cast<unsigned>(counter & 3)));
}

}  // namespace ft::philox
