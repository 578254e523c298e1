// Fuzz target: the tokenizer's split patterns and byte-level BPE (train/data/split_pattern.h,
// train/data/bpe_tokenizer.h). The input is a pattern, a NUL, then a text. The pattern parses or is
// refused with an ft::Error; its matches in the text's first 24 code points (a backtracking
// matcher can take exponential time on longer text) are in order, inside the text and not
// empty. The whole text, any bytes, encoded by a small GPT-2-style tokenizer decodes to exactly
// those bytes.
#include <string>

#include "lib/utf8.h"
#include "tests/fuzz/fuzz_check.h"
#include "train/data/bpe_tokenizer.h"
#include "train/data/split_pattern.h"
#include "train/io/json.h"

namespace {

using ft::fuzz::require;

/// The 256 byte symbols (GPT-2's table, rebuilt from its rule) and a few merges.
const ft::BpeTokenizer& tokenizer() {
  static const ft::BpeTokenizer t = [] {
    std::string vocab;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      std::string symbol;
      ft::append_utf8(symbol, printable ? static_cast<char32_t>(b) : next++);
      vocab += (b ? ", " : "") + ft::json_quote(symbol) + ": " + std::to_string(b);
    }
    vocab += ", \"th\": 256, \"the\": 257, \"\\u0120the\": 258, \"\\u0120\\u0120\": 259";
    const std::string json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {" + vocab +
                             "}, \"merges\": [\"t h\", \"th e\", \"\\u0120 the\", \"\\u0120 \\u0120\"]},"
                             " \"added_tokens\": [{\"id\": 260, \"content\": \"<|endoftext|>\", \"special\": true}],"
                             " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}}";
    return ft::BpeTokenizer::from_json(json, "fuzz tokenizer");
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = ft::fuzz::as_text(data, size);
  const size_t nul = input.find('\0');
  const std::string pattern = input.substr(0, nul), text = nul == std::string::npos ? "" : input.substr(nul + 1);
  std::u32string code_points;
  for (size_t at = 0; at < text.size() && code_points.size() < 24;) {
    const ft::DecodedCodePoint d = ft::decode_utf8_at(text, at);
    require(d.bytes >= 1 && d.bytes <= 4 && at + d.bytes <= text.size(), "a code point's bytes lie in the text");
    code_points.push_back(d.code);
    at += d.bytes;
  }
  if (pattern.size() <= 64) {
    ft::fuzz::accepts([&] {
      const ft::SplitPattern split(pattern);
      size_t last_end = 0;
      for (const auto& [begin, end] : split.find_all(code_points)) {
        require(begin >= last_end && begin < end && end <= code_points.size(), "matches are in order, inside, not empty");
        last_end = end;
      }
    });
  }
  const std::vector<int32_t> ids = tokenizer().encode(text);
  require(tokenizer().decode(ids) == text, "decode(encode(text)) gives the text's bytes back");
  return 0;
}
