// Philox4x32-10 (Salmon et al., SC'11), shared by the CPU and CUDA paths so that both draw
// identical bits.
//
// Counter layouts, both depending only on (seed, offset, i): never on grid, block size or vector
// width.
// - uniform (rand, normals): element i of a draw keyed on (seed, offset) uses the block counter
//   {(offset + i) / 4 low, high, 0, 0} and takes its 32-bit lane (offset + i) % 4; the value is
//   on a 2⁻²⁴ grid. Generator::advance reserves offsets in multiples of 4.
// - dropout_uniform (every dropout mask): element i takes the 16-bit half-word (offset + i) % 8
//   of block (offset + i) / 8 (lane h / 2, its low half for even h); the value is on a 2⁻¹⁶
//   grid. One Philox call covers 8 elements instead of 4: the rounds are most of the dropout
//   kernels' instructions (the backward was instruction-bound at 36% of HBM bandwidth), and a
//   2⁻¹⁶ grid moves a keep probability by less than 1.6e-5. PhiloxCounter reserves dropout's
//   offsets in multiples of 8, so a pack of 8 elements is one call.
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

/// Half-word `index` (0..7) of a block: the low half of lane index / 2 for even index.
FT_HOST_DEVICE uint32_t half_word(const Uint4& bits, unsigned index) {
  return (lane(bits, index >> 1) >> (16 * (index & 1))) & 0xffffu;
}

/// Dropout's uniform from a half-word: exact in f32 and identical everywhere.
FT_HOST_DEVICE float to_dropout_uniform(uint32_t half) { return static_cast<float>(half) * (1.0f / 65536.0f); }

/// Dropout's keep test, to_dropout_uniform(h) >= p, as one integer compare (`h >= threshold`) for
/// p in [0, 1]: to_dropout_uniform(h) is h·2⁻¹⁶ exactly, so it holds exactly when h >= ⌈p·2¹⁶⌉ (an
/// integer against a real); p·2¹⁶ is exact in f32. The float compare costs a conversion, a
/// multiply and a compare per element.
FT_HOST_DEVICE uint32_t keep_threshold(float p) { return static_cast<uint32_t>(ceilf(p * 65536.0f)); }

/// The uniform number of element i of the draw keyed on (seed, offset).
FT_HOST_DEVICE float uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t counter = offset + i;
  return to_uniform(lane(block_bits(seed, counter >> 2), static_cast<unsigned>(counter & 3)));
}

/// The number dropout compares with p for element i of the draw keyed on (seed, offset): the
/// element is kept when it is >= p.
FT_HOST_DEVICE float dropout_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t counter = offset + i;
  return to_dropout_uniform(half_word(block_bits(seed, counter >> 3), static_cast<unsigned>(counter & 7)));
}

/// Philox counters a dropout draw covers per call, and the multiple its offsets are reserved in.
/// dropout_uniform, half_word and the kernels' packs (lib/cuda/math.cuh's dropout_keep,
/// attention's DropoutMask) take a block as counter >> 3 and a half-word as counter & 7.
inline constexpr uint64_t kDropoutCountersPerBlock = 8;
static_assert(kDropoutCountersPerBlock == 8, "the dropout draw's shifts and masks assume 8 half-words a block");

/// The counter value a dropout draw starts at: `counter` rounded up to a multiple of 8 (a value
/// restored from an older checkpoint may be a multiple of 4 only; every pack would then take the
/// kernels' per-element path).
FT_HOST_DEVICE int64_t aligned_dropout_offset(int64_t counter) {
  constexpr auto kMultiple = static_cast<int64_t>(kDropoutCountersPerBlock);
  return (counter + kMultiple - 1) / kMultiple * kMultiple;
}

}  // namespace ft::philox
