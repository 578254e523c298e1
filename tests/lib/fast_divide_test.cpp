// FastDivide against the division operator: every divisor up to 4096 and powers of two and their
// neighbours to 2³¹ - 1, each on dividends at the ends of the range and random ones.
#include "lib/fast_divide.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/lib/test_util.h"

namespace ft {
namespace {

TEST(FastDivideTest, MatchesIntegerDivision) {
  std::mt19937 rng(static_cast<uint32_t>(test::test_seed()));
  std::uniform_int_distribution<uint32_t> dividend(0, 0x7fffffffu);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int k = 12; k < 31; ++k)
    for (int64_t delta : {-1, 0, 1}) divisors.push_back(static_cast<uint32_t>((int64_t{1} << k) + delta));
  divisors.push_back(0x7fffffffu);
  for (int k = 0; k < 200; ++k) divisors.push_back(std::max<uint32_t>(1, dividend(rng)));
  for (uint32_t d : divisors) {
    const FastDivide divide(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, 0x7ffffffeu, 0x7fffffffu,
                                0x7fffffffu / d * d, 0x7fffffffu / d * d - 1};
    for (int k = 0; k < 300; ++k) ns.push_back(dividend(rng));
    for (uint32_t n : ns) {
      if (n > 0x7fffffffu) continue;
      ASSERT_EQ(divide.quotient(n), n / d) << n << " / " << d;
    }
  }
}

}  // namespace
}  // namespace ft
