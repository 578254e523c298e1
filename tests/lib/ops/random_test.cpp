// Philox4x32-10 and philox_uniform: the published known answers, the counter layout the header
// promises (element i of a draw depends only on seed and offset + i), the distribution, and
// bit-identical values on the CPU and CUDA. Also the Generator's offset bookkeeping.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lib/ops/random/random.h"
#include "lib/philox.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

// Random123's known-answer vectors for Philox4x32-10 (its tests/kat_vectors): counter, key, result.
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  struct Kat {
    philox::Uint4 counter;
    uint32_t key0, key1;
    philox::Uint4 expected;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       0xffffffffu,
       0xffffffffu,
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       0xa4093822u,
       0x299f31d0u,
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const philox::Uint4 r = philox::philox4x32_10(k.counter, k.key0, k.key1);
    EXPECT_EQ(r.x, k.expected.x);
    EXPECT_EQ(r.y, k.expected.y);
    EXPECT_EQ(r.z, k.expected.z);
    EXPECT_EQ(r.w, k.expected.w);
  }
}

/// Philox4x32-10 on block counter {block (64 bits), 0, 0} and key {seed low, seed high}: the
/// four 32-bit lanes x, y, z, w.
std::array<uint32_t, 4> block_lanes(uint64_t seed, uint64_t block) {
  const philox::Uint4 bits = philox::philox4x32_10(
      {static_cast<uint32_t>(block & 0xffffffffu), static_cast<uint32_t>(block >> 32), 0u, 0u},
      static_cast<uint32_t>(seed & 0xffffffffu), static_cast<uint32_t>(seed >> 32));
  return {bits.x, bits.y, bits.z, bits.w};
}

/// The header's counter layout, spelled out: element i of the draw keyed on (seed, offset) is
/// lane (offset + i) % 4 of block (offset + i) / 4, its top 24 bits scaled to [0, 1).
float expected_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  const uint64_t counter = offset + i;
  return static_cast<float>(static_cast<double>(block_lanes(seed, counter / 4)[counter % 4] >> 8) / 16777216.0);
}

/// Dropout's layout, spelled out: element i is half-word (offset + i) % 8 of block
/// (offset + i) / 8, counting lane x's low half, its high half, then y, z and w, scaled by 2⁻¹⁶.
float expected_dropout_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  const uint64_t counter = offset + i;
  const uint32_t lane = block_lanes(seed, counter / 8)[(counter % 8) / 2];
  const uint32_t half = counter % 2 == 0 ? lane & 0xffffu : lane >> 16;
  return static_cast<float>(static_cast<double>(half) / 65536.0);
}

// The kernels' integer keep test must agree with to_dropout_uniform(h) >= p for every half-word
// h, for p on the 2⁻¹⁶ grid and off it (both sides of each grid point), 0, 1 and random p.
TEST(PhiloxTest, KeepThresholdMatchesTheFloatCompare) {
  std::mt19937 rng(static_cast<uint32_t>(test_seed()));
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> ps = {0.0f, 1e-30f, 1.5258789e-5f, 0.1f, 0.25f, 0.5f, 0.9f, 0.99999994f, 1.0f};
  for (int k = 0; k < 100; ++k) ps.push_back(unit(rng));
  for (int k = 0; k < 50; ++k) {
    const float grid = static_cast<float>(rng() >> 16) / 65536.0f;
    ps.insert(ps.end(), {grid, std::nextafter(grid, 0.0f), std::nextafter(grid, 1.0f)});
  }
  for (float p : ps) {
    SCOPED_TRACE(p);
    const uint32_t threshold = philox::keep_threshold(p);
    for (uint32_t h = 0; h < 65536; ++h)
      ASSERT_EQ(h >= threshold, philox::to_dropout_uniform(h) >= p) << "half-word " << h;
  }
}

TEST(PhiloxTest, DropoutUniformFollowsItsLayout) {
  for (uint64_t seed : {0ull, 1234ull, 0x123456789abcdefull}) {
    for (uint64_t offset : {0ull, 4ull, 7ull, (1ull << 35) + 8}) {
      for (uint64_t i = 0; i < 37; ++i)
        ASSERT_EQ(philox::dropout_uniform(seed, offset, i), expected_dropout_uniform(seed, offset, i))
            << "seed " << seed << " offset " << offset << " i " << i;
    }
  }
}

TEST(PhiloxUniformTest, FollowsTheCounterLayout) {
  for (uint64_t seed : {0ull, 1234ull, 0x123456789abcdefull}) {
    for (uint64_t offset : {0ull, 4ull, 7ull, (1ull << 32) + 4}) {
      const std::vector<double> v = philox_uniform({37}, seed, offset).to_vector();
      for (uint64_t i = 0; i < v.size(); ++i)
        ASSERT_EQ(v[i], expected_uniform(seed, offset, i)) << "seed " << seed << " offset " << offset << " i " << i;
    }
  }
}

TEST(PhiloxUniformTest, IsF32WithoutGradient) {
  const Tensor u = philox_uniform({3, 5}, 1, 0);
  EXPECT_EQ(u.dtype(), DType::F32);
  EXPECT_EQ(u.shape(), (Shape{3, 5}));
  EXPECT_FALSE(u.requires_grad());
  EXPECT_EQ(u.grad_fn(), nullptr);
}

// Both layouts. Dropout's two half-words of a 32-bit lane sit next to each other in the stream:
// neighbours must be uncorrelated, and at p = 1/2 both are kept a quarter of the time.
TEST(PhiloxUniformTest, ValuesInUnitIntervalWithUniformMoments) {
  const uint64_t seed = test_seed();
  const int64_t n = 1 << 20;
  for (UniformDraw draw : {UniformDraw::Word, UniformDraw::DropoutHalfWord}) {
    SCOPED_TRACE(static_cast<int>(draw));
    const std::vector<double> v = philox_uniform({n}, seed, 0, kCPU, draw).to_vector();
    double total = 0.0, squares = 0.0, neighbours = 0.0;
    int64_t both_kept = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_GE(v[i], 0.0);
      ASSERT_LT(v[i], 1.0);
      total += v[i];
      squares += v[i] * v[i];
      if (i + 1 < v.size()) neighbours += (v[i] - 0.5) * (v[i + 1] - 0.5);
      if (i % 2 == 0) both_kept += v[i] >= 0.5 && v[i + 1] >= 0.5;
    }
    const double mean = total / static_cast<double>(n), var = squares / static_cast<double>(n) - mean * mean;
    // Standard error of the mean is sqrt(1/12 / n) = 2.8e-4; allow about 10 of them.
    EXPECT_NEAR(mean, 0.5, 3e-3);
    EXPECT_NEAR(var, 1.0 / 12.0, 2e-3);
    // Lag-1 correlation: standard error 1/sqrt(n) = 1e-3.
    EXPECT_NEAR(neighbours / static_cast<double>(n - 1) / (1.0 / 12.0), 0.0, 5e-3);
    // Pairs both at or above 1/2: a quarter, standard error sqrt(3/16 / (n/2)) = 6e-4.
    EXPECT_NEAR(static_cast<double>(both_kept) / static_cast<double>(n / 2), 0.25, 4e-3);
    // Each tenth of [0, 1) holds about a tenth of the values.
    std::vector<int64_t> bins(10, 0);
    for (double x : v) ++bins[static_cast<size_t>(x * 10.0)];
    for (int64_t count : bins) EXPECT_NEAR(static_cast<double>(count) / static_cast<double>(n), 0.1, 3e-3);
  }
}

TEST(PhiloxUniformTest, DifferentOffsetsAndSeedsGiveDifferentStreams) {
  const uint64_t seed = test_seed();
  const std::vector<double> base = philox_uniform({1000}, seed, 0).to_vector();
  auto equal_fraction = [&](const std::vector<double>& other) {
    int64_t same = 0;
    for (size_t i = 0; i < base.size(); ++i) same += base[i] == other[i];
    return static_cast<double>(same) / static_cast<double>(base.size());
  };
  EXPECT_LT(equal_fraction(philox_uniform({1000}, seed, 4096).to_vector()), 0.01);
  EXPECT_LT(equal_fraction(philox_uniform({1000}, seed, 1).to_vector()), 0.01);
  EXPECT_LT(equal_fraction(philox_uniform({1000}, seed + 1, 0).to_vector()), 0.01);
  EXPECT_LT(equal_fraction(philox_uniform({1000}, seed ^ (1ull << 40), 0).to_vector()), 0.01);  // the key's high word
}

// Element i depends on offset + i only: a draw at offset 4 is the offset-0 draw shifted by 4.
TEST(PhiloxUniformTest, OffsetShiftsTheStream) {
  const uint64_t seed = test_seed();
  const std::vector<double> from0 = philox_uniform({40}, seed, 0).to_vector();
  const std::vector<double> from4 = philox_uniform({36}, seed, 4).to_vector();
  const std::vector<double> from6 = philox_uniform({34}, seed, 6).to_vector();
  for (size_t i = 0; i < from4.size(); ++i) EXPECT_EQ(from4[i], from0[i + 4]) << i;
  for (size_t i = 0; i < from6.size(); ++i) EXPECT_EQ(from6[i], from0[i + 6]) << i;
}

TEST(PhiloxUniformTest, ElementValueDoesNotDependOnTensorSize) {
  const uint64_t seed = test_seed();
  for (uint64_t offset : {0ull, 12ull, 5ull}) {
    const std::vector<double> small = philox_uniform({10}, seed, offset).to_vector();
    const std::vector<double> large = philox_uniform({1000}, seed, offset).to_vector();
    const std::vector<double> shaped = philox_uniform({10, 100}, seed, offset).to_vector();
    for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(small[i], large[i]) << i;
    EXPECT_EQ(shaped, large);
  }
}

TEST(PhiloxUniformTest, CudaIsBitIdenticalToCpu) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  const uint64_t seed = test_seed();
  for (int64_t n : {1, 3, 33, 257, 4099, (1 << 20) + 3}) {
    for (uint64_t offset : {0ull, 4ull, 7ull, (1ull << 32) + 8, (1ull << 36) + 8}) {
      for (uint64_t s : std::vector<uint64_t>{seed, 0, 0xfedcba9876543210ull}) {
        for (UniformDraw draw : {UniformDraw::Word, UniformDraw::DropoutHalfWord}) {
          const Tensor gpu = philox_uniform({n}, s, offset, kCUDA, draw);
          ASSERT_TRUE(gpu.is_cuda());
          const Tensor cpu = philox_uniform({n}, s, offset, kCPU, draw);
          // Compare the raw bits: the promise is the same bits, not merely close values.
          const Tensor back = gpu.to(kCPU);
          ASSERT_EQ(std::memcmp(back.data_ptr(), cpu.data_ptr(), cpu.nbytes()), 0)
              << "n " << n << " offset " << offset << " seed " << s << " draw " << static_cast<int>(draw);
        }
      }
    }
  }
}

TEST(GeneratorTest, AdvanceReservesMultiplesOfFour) {
  Generator gen(7);
  EXPECT_EQ(gen.seed(), 7u);
  EXPECT_EQ(gen.advance(1), 0u);
  EXPECT_EQ(gen.offset(), 4u);
  EXPECT_EQ(gen.advance(5), 4u);
  EXPECT_EQ(gen.offset(), 12u);
  EXPECT_EQ(gen.advance(8), 12u);
  EXPECT_EQ(gen.offset(), 20u);
  EXPECT_EQ(gen.advance(0), 20u);
  EXPECT_EQ(gen.offset(), 20u);
  gen.set_offset(100);
  EXPECT_EQ(gen.advance(3), 100u);
}

// rand() draws from the generator's reserved offsets, so successive draws never overlap.
TEST(GeneratorTest, RandUsesSuccessiveOffsets) {
  const uint64_t seed = test_seed();
  Generator gen(seed);
  const Tensor first = Tensor::rand({5}, gen);
  const Tensor second = Tensor::rand({3, 3}, gen);
  EXPECT_EQ(first.to_vector(), philox_uniform({5}, seed, 0).to_vector());
  EXPECT_EQ(second.to_vector(), philox_uniform({3, 3}, seed, 8).to_vector());
  EXPECT_EQ(gen.offset(), 20u);
}

}  // namespace
}  // namespace ft
