// Strict numbers (lib/parse.h): the whole text, in range, finite; every other text is an
// ft::Error naming what was being read.
#include <gtest/gtest.h>

#include <limits>

#include "lib/parse.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

TEST(Parse, IntegersWholeAndInRange) {
  EXPECT_EQ(parse_int64("0", "x"), 0);
  EXPECT_EQ(parse_int64("-42", "x"), -42);
  EXPECT_EQ(parse_int64("+7", "x"), 7);
  EXPECT_EQ(parse_int64("9223372036854775807", "x"), std::numeric_limits<int64_t>::max());
  EXPECT_FT_ERROR(parse_int64("2x", "the step"), "the step: '2x' is not an integer");
  EXPECT_FT_ERROR(parse_int64("", "the step"), "is not an integer");
  EXPECT_FT_ERROR(parse_int64(" 3", "the step"), "is not an integer");
  EXPECT_FT_ERROR(parse_int64("1.5", "the step"), "is not an integer");
  EXPECT_FT_ERROR(parse_int64("99999999999999999999", "the step"), "out of range");
  // from_chars takes the '-' after a skipped '+'; found by the cli fuzz target
  // (tests/fuzz/cli/regress-plus-minus).
  EXPECT_FT_ERROR(parse_int64("+-5", "the step"), "'+-5' is not an integer");
  EXPECT_FT_ERROR(parse_int64("+", "the step"), "is not an integer");
}

TEST(Parse, NumbersWholeFiniteAndInRange) {
  EXPECT_DOUBLE_EQ(parse_double("3e-4", "--lr"), 3e-4);
  EXPECT_DOUBLE_EQ(parse_double("-0.5", "--lr"), -0.5);
  EXPECT_FT_ERROR(parse_double("nan", "--lr"), "--lr: 'nan' is not a finite number");
  EXPECT_FT_ERROR(parse_double("inf", "--lr"), "not a finite number");
  EXPECT_FT_ERROR(parse_double("1e999", "--lr"), "not a finite number");
  EXPECT_FT_ERROR(parse_double("0.1x", "--lr"), "'0.1x' is not a number");
  EXPECT_FT_ERROR(parse_double("", "--lr"), "is not a number");
  // strtod would skip these; found by the cli fuzz target (tests/fuzz/cli/regress-leading-form-feed).
  EXPECT_FT_ERROR(parse_double(" 1", "--lr"), "' 1' is not a number");
  EXPECT_FT_ERROR(parse_double("\f\f320", "--lr"), "is not a number");
}

TEST(Parse, DeviceNamesAreStrictToo) {
  EXPECT_EQ(Device::parse("cuda:1").index, 1);
  EXPECT_FT_ERROR(Device::parse("cuda:1x"), "unknown device");
  EXPECT_FT_ERROR(Device::parse("cuda:-1"), "unknown device");
  EXPECT_FT_ERROR(Device::parse("cuda:99999999999999999999"), "unknown device");
}

}  // namespace
}  // namespace ft
