// The split patterns' matcher on small texts whose pieces are worked out by hand from the
// Oniguruma semantics they follow (leftmost alternative first, greedy longest first, then
// backtracking), the UTF-8 reading under it, and the constructs it refuses by name. The
// tokenizer's parity with Hugging Face's tokenizers on hundreds of texts is
// tests/train/data/tokenizer_parity.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/utf8.h"
#include "tests/lib/test_util.h"
#include "train/data/split_pattern.h"
#include "train/data/unicode_classes.h"

namespace ft {
namespace {

using test::error_mentions;

std::u32string code_points(const std::string& utf8) {
  std::u32string out;
  for (size_t at = 0; at < utf8.size();) {
    const DecodedCodePoint d = decode_utf8_at(utf8, at);
    out.push_back(d.code);
    at += d.bytes;
  }
  return out;
}

/// The matched pieces of `text` as UTF-8 strings.
std::vector<std::string> pieces(const std::string& pattern, const std::string& text) {
  const std::u32string cps = code_points(text);
  std::vector<std::string> out;
  for (const auto& [begin, end] : SplitPattern(pattern).find_all(cps)) {
    std::string piece;
    for (size_t i = begin; i < end; ++i) append_utf8(piece, cps[i]);
    out.push_back(piece);
  }
  return out;
}

constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TEST(SplitPattern, Gpt2PatternSplitsWordsNumbersMarksAndSpace) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(kGpt2, "Hello world's 42!"), (V{"Hello", " world", "'s", " 42", "!"}));
  // \s+(?!\S) gives back the space before a word, which then leads the word.
  EXPECT_EQ(pieces(kGpt2, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces(kGpt2, "x\n\n"), (V{"x", "\n\n"}));
  // GPT-2's contractions are case-sensitive: "'S" is a mark and a letter.
  EXPECT_EQ(pieces(kGpt2, "IT'S"), (V{"IT", "'", "S"}));
  EXPECT_EQ(pieces(kGpt2, "café 東京"), (V{"caf\xC3\xA9", " \xE6\x9D\xB1\xE4\xBA\xAC"}));
}

TEST(SplitPattern, Llama3PatternGroupsDigitsByThreeAndFoldsContractions) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(kLlama3, "12345"), (V{"123", "45"}));
  EXPECT_EQ(pieces(kLlama3, "IT'S"), (V{"IT", "'S"}));
  // A mark may lead a word; newlines gather with the marks before them.
  EXPECT_EQ(pieces(kLlama3, "(word) ok.\n\nx"), (V{"(word", ")", " ok", ".\n\n", "x"}));
}

TEST(SplitPattern, QuantifiersLookaheadAndClasses) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("a+?", "aaa"), (V{"a", "a", "a"}));          // lazy: one at a time
  EXPECT_EQ(pieces("a{2}", "aaaaa"), (V{"aa", "aa"}));           // the fifth never matches
  EXPECT_EQ(pieces("[a-c]+|x(?=y)", "abcxyxz"), (V{"abc", "x"}));
  EXPECT_EQ(pieces("[^a-c\\s]+", "ab de f"), (V{"de", "f"}));
  EXPECT_EQ(pieces("(?:ab)+", "ababa"), (V{"abab"}));            // a group repeated, backtracking
  EXPECT_EQ(pieces("\\P{L}+", "ab12 cd"), (V{"12 "}));
  EXPECT_EQ(pieces(".+", "ab\ncd"), (V{"ab", "cd"}));            // . stops at a newline
}

TEST(SplitPattern, BytesThatAreNotUtf8AreMarksOfTheirOwn) {
  // \xFF and a truncated sequence are neither letters, numbers nor space.
  const std::u32string cps = code_points("ab\xFF\xE6\x9D");
  ASSERT_EQ(cps.size(), 5u);
  EXPECT_EQ(cps[2], kInvalidByte + 0xFF);
  EXPECT_FALSE(is_unicode_letter(cps[2]) || is_unicode_number(cps[2]) || is_unicode_whitespace(cps[2]));
  EXPECT_EQ(SplitPattern(kGpt2).find_all(cps).size(), 2u);  // "ab", then the three bytes
}

TEST(Utf8, DecodesWellFormedAndRefusesTheRestByteByByte) {
  EXPECT_EQ(decode_utf8_at("\xF0\x9F\x98\x80", 0).code, 0x1F600u);
  EXPECT_EQ(decode_utf8_at("\xF0\x9F\x98\x80", 0).bytes, 4u);
  for (const char* bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xE6\x9D"}) {
    SCOPED_TRACE(bad);
    const DecodedCodePoint d = decode_utf8_at(bad, 0);
    EXPECT_EQ(d.bytes, 1u);
    EXPECT_EQ(d.code, kInvalidByte + static_cast<unsigned char>(bad[0]));
  }
  std::string out;
  for (char32_t c : {U'a', U'\u00e9', U'\u6771', U'\U0001F600'}) append_utf8(out, c);
  EXPECT_EQ(out, "a\xC3\xA9\xE6\x9D\xB1\xF0\x9F\x98\x80");
}

TEST(UnicodeClasses, LettersNumbersAndWhiteSpace) {
  for (char32_t c : {U'a', U'Z', U'\u00e9', U'\u03a9', U'\u6771', U'\uac00'}) EXPECT_TRUE(is_unicode_letter(c));
  for (char32_t c : {U'0', U'\u0663', U'\u00bd', U'\u2167'}) EXPECT_TRUE(is_unicode_number(c));
  for (char32_t c : {U' ', U'\t', U'\u00a0', U'\u3000', U'\u0085'}) EXPECT_TRUE(is_unicode_whitespace(c));
  for (char32_t c : {U'!', U'\u0301', U'\U0001F600', U'_'}) {
    EXPECT_FALSE(is_unicode_letter(c) || is_unicode_number(c) || is_unicode_whitespace(c));
  }
}

TEST(SplitPattern, RefusesWhatItCannotMatchByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(ab", "a missing ')'"},        {"ab)", "an unmatched ')'"},    {"[ab", "a missing ']'"},
      {"\\d+", "the escape \\d"},      {"^a", "an anchor"},            {"*a", "nothing to repeat"},
      {"a{2,1}", "a malformed count"}, {"\\p{Lu}", "\\p{Lu}"},         {"a++", "a possessive quantifier"},
      {"(?<n>a)", "the group '(?<'"},  {"[z-a]", "end comes before"},  {"a\\", "a trailing backslash"}};
  for (const auto& [pattern, message] : cases) {
    SCOPED_TRACE(pattern);
    EXPECT_TRUE(error_mentions([&] { SplitPattern p(pattern); }, message));
  }
}

}  // namespace
}  // namespace ft
