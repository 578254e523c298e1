// The BPE tokenizer on a tokenizer.json written here by hand: merges applied by rank (not by
// order of appearance in the text), ignore_merges, added tokens cut out longest first, the
// template's tokens, decoding back to the very bytes (not UTF-8 too), and the errors for what it
// cannot read. tests/train/data/tokenizer_parity.py compares it with Hugging Face's tokenizers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/utf8.h"
#include "tests/lib/test_util.h"
#include "train/data/bpe_tokenizer.h"
#include "train/io/json.h"

namespace ft {
namespace {

using test::error_mentions;
using Ids = std::vector<int32_t>;

/// GPT-2's bytes_to_unicode as its Python source builds it: the printable bytes, then the rest
/// numbered from 256.
std::vector<std::string> byte_symbols() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) bs.push_back(b), cs.push_back(256 + n++);
  std::vector<std::string> symbols(256);
  for (size_t i = 0; i < bs.size(); ++i) append_utf8(symbols[static_cast<size_t>(bs[i])], static_cast<char32_t>(cs[i]));
  return symbols;
}

/// A tokenizer.json: the 256 byte symbols as ids 0-255, then `extra` tokens from 256 in order,
/// the `merges` ("a b") in rank order, and the rest of the document given whole.
std::string tokenizer_json(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                           const std::string& rest, bool ignore_merges = false, int skip_byte = -1) {
  const std::vector<std::string> symbols = byte_symbols();
  std::string vocab;
  int id = 0;
  for (const std::string& s : symbols) {
    if (id != skip_byte) vocab += (vocab.empty() ? "" : ", ") + json_quote(s) + ": " + std::to_string(id);
    ++id;
  }
  for (const std::string& s : extra) vocab += ", " + json_quote(s) + ": " + std::to_string(id++);
  std::string merge_list;
  for (const std::string& m : merges) merge_list += (merge_list.empty() ? "" : ", ") + json_quote(m);
  return "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": " + std::string(ignore_merges ? "true" : "false") +
         ", \"vocab\": {" + vocab + "}, \"merges\": [" + merge_list + "]}" + rest + "}";
}

const std::string kByteLevel =
    ", \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},"
    " \"decoder\": {\"type\": \"ByteLevel\"}";

TEST(BpeTokenizer, MergesApplyByRank) {
  // "abc": with b+c ranked first the result is [a, bc] and no merge joins them; with a+b
  // first, [ab, c] and then abc.
  const auto bc_first = BpeTokenizer::from_json(tokenizer_json({"bc", "ab", "abc"}, {"b c", "a b", "ab c"}, kByteLevel), "t");
  EXPECT_EQ(bc_first.encode("abc"), (Ids{'a', 256}));
  const auto ab_first = BpeTokenizer::from_json(tokenizer_json({"bc", "ab", "abc"}, {"a b", "b c", "ab c"}, kByteLevel), "t");
  EXPECT_EQ(ab_first.encode("abc"), (Ids{258}));
  // Equal pairs merge leftmost first: "aaa" -> [aa, a].
  const auto aa = BpeTokenizer::from_json(tokenizer_json({"aa"}, {"a a"}, kByteLevel), "t");
  EXPECT_EQ(aa.encode("aaa"), (Ids{256, 'a'}));
  // A space is the symbol U+0120 and leads the word after it (GPT-2's pattern).
  EXPECT_EQ(aa.encode("a aa"), (Ids{'a', static_cast<int32_t>(aa.token_id("\xC4\xA0")), 256}));
}

TEST(BpeTokenizer, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  // "abc" is in the vocabulary but no merge reaches it: only ignore_merges gives it whole.
  const std::string json_merges = tokenizer_json({"bc", "abc"}, {"b c"}, kByteLevel, false);
  const std::string json_whole = tokenizer_json({"bc", "abc"}, {"b c"}, kByteLevel, true);
  EXPECT_EQ(BpeTokenizer::from_json(json_merges, "t").encode("abc"), (Ids{'a', 256}));
  EXPECT_EQ(BpeTokenizer::from_json(json_whole, "t").encode("abc"), (Ids{257}));
}

TEST(BpeTokenizer, AddedTokensLongestFirstAndTheTemplate) {
  const std::string added =
      kByteLevel +
      ", \"added_tokens\": [{\"id\": 300, \"content\": \"<x>\", \"special\": true},"
      " {\"id\": 301, \"content\": \"<xy>\", \"special\": false}, {\"id\": 302, \"content\": \"<s>\", \"special\": true}],"
      " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
      " {\"Sequence\": {\"id\": \"A\"}}]}";
  const auto t = BpeTokenizer::from_json(tokenizer_json({}, {}, added), "t");
  EXPECT_EQ(t.vocab_size(), 303);
  EXPECT_EQ(t.encode("q<xy>z<x>"), (Ids{'q', 301, 'z', 300}));
  EXPECT_EQ(t.encode("<x", true), (Ids{302, '<', 'x'}));
  EXPECT_EQ(t.prefix_tokens(), (Ids{302}));
  EXPECT_EQ(t.decode({302, 'q', 301, 300}), "<s>q<xy><x>");
  EXPECT_EQ(t.decode({302, 'q', 301, 300}, true), "q<xy>");
  EXPECT_TRUE(error_mentions([&] { t.decode({'a', 299}); }, "token id 299 is not in the vocabulary"));
  EXPECT_TRUE(error_mentions([&] { t.decode({-1}); }, "token id -1"));
}

TEST(BpeTokenizer, AnyBytesGoThereAndBack) {
  const auto t = BpeTokenizer::from_json(tokenizer_json({"aa"}, {"a a"}, kByteLevel), "t");
  const std::string bytes = std::string("a\xFF\x00\xE6\x9D z\n\xF0\x9F\x98\x80", 12);
  const Ids ids = t.encode(bytes);
  EXPECT_EQ(ids.size(), bytes.size());  // one byte symbol each, no merge applies
  EXPECT_EQ(t.decode(ids), bytes);
}

TEST(BpeTokenizer, RefusesWhatItCannotReproduce) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {tokenizer_json({}, {}, kByteLevel, false, 65), "lacks the byte-level symbol of byte 65"},
      {tokenizer_json({"ab"}, {"a q"}, kByteLevel), "merge 0 ('a' + 'q') names a token the vocabulary lacks"},
      {tokenizer_json({}, {"a b c"}, kByteLevel), "merge 0 ('a b c') is not two tokens"},
      {tokenizer_json({}, {}, ", \"decoder\": {\"type\": \"ByteLevel\"}"), "no pre-tokenizer"},
      {tokenizer_json({}, {}, ", \"pre_tokenizer\": {\"type\": \"Whitespace\"}"), "the pre-tokenizer 'Whitespace'"},
      {tokenizer_json({}, {}, kByteLevel + ", \"normalizer\": {\"type\": \"NFC\"}"), "the normalizer 'NFC'"},
      {tokenizer_json({}, {}, kByteLevel + ", \"added_tokens\": [{\"id\": 260, \"content\": \"<a>\", \"lstrip\": true}]"),
       "sets lstrip"},
      {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "the model type 'WordPiece'"},
      {"[1, 2]", "not a tokenizer.json"},
  };
  for (const auto& [json, message] : cases) {
    SCOPED_TRACE(message);
    EXPECT_TRUE(error_mentions([&] { BpeTokenizer::from_json(json, "tok 'x.json'"); }, "tok 'x.json'"));
    EXPECT_TRUE(error_mentions([&] { BpeTokenizer::from_json(json, "tok 'x.json'"); }, message));
  }
  EXPECT_TRUE(error_mentions([] { BpeTokenizer::from_file("/nonexistent/tokenizer.json"); },
                             "cannot open '/nonexistent/tokenizer.json'"));
}

}  // namespace
}  // namespace ft
