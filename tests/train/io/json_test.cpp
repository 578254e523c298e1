// The JSON reader and writer shared by safetensors headers, PEFT adapter configs and tokenizer
// files: every kind of value, \u escapes to UTF-8, strict numbers (whole token, in range), the integers-only subset a safetensors header
// is read with, and quoting and number formatting that read back unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "lib/error.h"
#include "tests/lib/test_util.h"
#include "train/io/json.h"

namespace ft {
namespace {

using test::error_mentions;
using Kind = JsonValue::Kind;

TEST(Json, ParsesEveryKind) {
  const JsonValue v = parse_json(
      " {\"s\": \"a\\\"b\\\\c\\n\\u0041\", \"i\": -42, \"x\": 0.05, \"e\": 1e-05, \"t\": true, \"f\": false,"
      " \"n\": null, \"a\": [1, [], {}], \"big\": 9223372036854775807} ",
      "test");
  ASSERT_EQ(v.kind, Kind::Object);
  EXPECT_EQ(v.find("s")->text, "a\"b\\c\nA");
  EXPECT_EQ(v.find("i")->kind, Kind::Integer);
  EXPECT_EQ(v.find("i")->integer, -42);
  EXPECT_EQ(v.find("i")->number, -42.0);
  EXPECT_EQ(v.find("x")->kind, Kind::Number);
  EXPECT_EQ(v.find("x")->number, 0.05);
  EXPECT_EQ(v.find("e")->number, 1e-05);
  EXPECT_TRUE(v.find("t")->boolean);
  EXPECT_EQ(v.find("f")->kind, Kind::Bool);
  EXPECT_FALSE(v.find("f")->boolean);
  EXPECT_EQ(v.find("n")->kind, Kind::Null);
  ASSERT_EQ(v.find("a")->items.size(), 3u);
  EXPECT_EQ(v.find("a")->items[2].kind, Kind::Object);
  EXPECT_EQ(v.find("big")->integer, INT64_MAX);
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, RejectsBadNumbersAndEscapesAsFtErrors) {
  // Each is an ft::Error carrying the context, never a std::out_of_range or a partial read.
  for (const char* text : {"9223372036854775808", "-", "1.", "1e", "1e+", ".5", "1e400", "[1 2]", "tru",
                           "\"\\u00zz\"", "\"\\u12\"", "{\"a\" 1}", "[[[[[[[[[1]]]]]]]]]", "1 2"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(error_mentions([&] { parse_json(text, "ctx 'f.json'"); }, "ctx 'f.json' at byte "));
  }
}

TEST(Json, UnicodeEscapesBecomeUtf8) {
  // A tokenizer.json's vocabulary: "\u0120" is GPT-2's byte-level space, and a code point past
  // the BMP comes as a surrogate pair.
  EXPECT_EQ(parse_json("\"\\u0120the\"", "t").text, "\xC4\xA0the");
  EXPECT_EQ(parse_json("\"\\u6771\\u4eac\"", "t").text, "\xE6\x9D\xB1\xE4\xBA\xAC");  // 東京
  EXPECT_EQ(parse_json("\"\\ud83d\\ude00\"", "t").text, "\xF0\x9F\x98\x80");             // U+1F600
  EXPECT_EQ(parse_json("\"caf\xC3\xA9\"", "t").text, "caf\xC3\xA9");  // raw UTF-8 passes through
  for (const char* text : {"\"\\ud83d\"", "\"\\ud83dx\"", "\"\\ud83d\\u0041\"", "\"\\ude00\""}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(error_mentions([&] { parse_json(text, "tok 'f.json'"); }, "unpaired surrogate"));
  }
}

TEST(Json, IntegersOnlyRefusesOtherScalars) {
  EXPECT_EQ(parse_json("[0, -7, 123]", "h", JsonScalars::IntegersOnly).items[2].integer, 123);
  for (const char* text : {"[1.5]", "[1e3]", "[true]", "[null]"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(error_mentions([&] { parse_json(text, "header", JsonScalars::IntegersOnly); }, "header at byte"));
    EXPECT_NO_THROW(parse_json(text, "all"));
  }
}

TEST(Json, QuotedStringsAndNumbersReadBack) {
  const std::string s = "quote \" backslash \\ newline \n tab \t bell \x07";
  EXPECT_EQ(parse_json(json_quote(s), "q").text, s);
  // Integral doubles past int64 too (tests/fuzz/json/regress-integral-double-past-int64).
  for (double x : {0.0, 16.0, 0.05, -1.0 / 3.0, 1e-300, 123456789.125, 0x1p63, -0x1p63, 1e300}) {
    SCOPED_TRACE(x);
    EXPECT_EQ(parse_json(json_number(x), "n").number, x);
  }
  EXPECT_EQ(json_number(16.0), "16");
  EXPECT_EQ(json_number(0.05), "0.05");
  EXPECT_TRUE(error_mentions([] { json_number(std::nan("")); }, "json_number"));
}

}  // namespace
}  // namespace ft
