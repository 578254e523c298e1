// Philox4x32-10 and philox_uniform: the published known answers, the counter layout the header
// promises (element i of a draw depends only on seed and offset + i), the distribution, and
// bit-identical values on the CPU and CUDA. Also the Generator's offset bookkeeping.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lib/ops/random.h"
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

/// The header's counter layout, spelled out: element i of the draw keyed on (seed, offset) is
/// lane (offset + i) % 4 of Philox on block counter {(offset + i) / 4 (64 bits), 0, 0} and key
/// {seed low, seed high}, its top 24 bits scaled to [0, 1).
float expected_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  const uint64_t counter = offset + i, block = counter / 4;
  const philox::Uint4 bits = philox::philox4x32_10(
      {static_cast<uint32_t>(block & 0xffffffffu), static_cast<uint32_t>(block >> 32), 0u, 0u},
      static_cast<uint32_t>(seed & 0xffffffffu), static_cast<uint32_t>(seed >> 32));
  const uint32_t lanes[4] = {bits.x, bits.y, bits.z, bits.w};
  return static_cast<float>(static_cast<double>(lanes[counter % 4] >> 8) / 16777216.0);
}

// The kernels' integer keep test must agree with to_uniform(bits) >= p on every input: at the
// boundaries (bits whose top 24 bits are exactly p·2²⁴, and one below), for p on the 2⁻²⁴ grid
// and off it, and for random words.
TEST(PhiloxTest, KeepThresholdMatchesTheFloatCompare) {
  std::mt19937 rng(static_cast<uint32_t>(test_seed()));
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> ps = {0.0f, 1e-30f, 5.9604645e-8f, 0.1f, 0.25f, 0.5f, 0.9f, 0.99999994f};
  for (int k = 0; k < 200; ++k) ps.push_back(std::min(unit(rng), 0.99999994f));
  for (int k = 0; k < 50; ++k) ps.push_back(static_cast<float>(rng() >> 8) / 16777216.0f);
  for (float p : ps) {
    SCOPED_TRACE(p);
    const uint32_t threshold = philox::keep_threshold(p);
    const uint32_t top = static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0));
    std::vector<uint32_t> words = {0u, 0xffffffffu, threshold, threshold - 1, threshold + 255, threshold + 256};
    for (uint32_t t : {top, top - 1, top + 1})
      for (uint32_t low : {0u, 1u, 255u}) words.push_back((t << 8) | low);
    for (int k = 0; k < 2000; ++k) words.push_back(static_cast<uint32_t>(rng()));
    for (uint32_t w : words) ASSERT_EQ(w >= threshold, philox::to_uniform(w) >= p) << std::hex << w;
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

TEST(PhiloxUniformTest, ValuesInUnitIntervalWithUniformMoments) {
  const uint64_t seed = test_seed();
  const int64_t n = 1 << 20;
  const std::vector<double> v = philox_uniform({n}, seed, 0).to_vector();
  double total = 0.0, squares = 0.0;
  for (double x : v) {
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    total += x;
    squares += x * x;
  }
  const double mean = total / static_cast<double>(n), var = squares / static_cast<double>(n) - mean * mean;
  // Standard error of the mean is sqrt(1/12 / n) = 2.8e-4; allow about 10 of them.
  EXPECT_NEAR(mean, 0.5, 3e-3);
  EXPECT_NEAR(var, 1.0 / 12.0, 2e-3);
  // Each tenth of [0, 1) holds about a tenth of the values.
  std::vector<int64_t> bins(10, 0);
  for (double x : v) ++bins[static_cast<size_t>(x * 10.0)];
  for (int64_t count : bins) EXPECT_NEAR(static_cast<double>(count) / static_cast<double>(n), 0.1, 3e-3);
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
    for (uint64_t offset : {0ull, 4ull, 7ull, (1ull << 32) + 8}) {
      for (uint64_t s : std::vector<uint64_t>{seed, 0, 0xfedcba9876543210ull}) {
        const Tensor gpu = philox_uniform({n}, s, offset, kCUDA);
        ASSERT_TRUE(gpu.is_cuda());
        const Tensor cpu = philox_uniform({n}, s, offset, kCPU);
        // Compare the raw bits: the promise is the same bits, not merely close values.
        const Tensor back = gpu.to(kCPU);
        ASSERT_EQ(std::memcmp(back.data_ptr(), cpu.data_ptr(), cpu.nbytes()), 0)
            << "n " << n << " offset " << offset << " seed " << s;
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
