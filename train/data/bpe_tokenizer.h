// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json, as GPT-2, Llama 3 and Qwen2
// ship theirs, encoding text as the `tokenizers` package does, token for token:
//   1. added tokens (special or not) are cut out of the text first, leftmost and longest first;
//   2. each stretch between them is split by the pre-tokenizer: GPT-2's pattern (ByteLevel with
//      use_regex) or the Split patterns of a Sequence (Isolated: the matches and the gaps between
//      them are pieces), in order;
//   3. each piece's bytes become byte-level symbols (GPT-2's byte-to-character table), and BPE
//      merges adjacent symbols by the merges' ranks, lowest first, leftmost first on a tie; with
//      ignore_merges (Llama 3) a piece that is a vocabulary entry whole is that entry;
//   4. with add_special_tokens, the post-processor's template adds its tokens (Llama 3's
//      <|begin_of_text|>).
// Decoding maps the tokens back to bytes. What it cannot reproduce (a normalizer, another model
// type, byte fallback, a pre-tokenizer or template it does not know, an added token with
// lstrip/rstrip/single_word) is an ft::Error naming it at load, not a silently different encoding.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "train/data/split_pattern.h"

namespace ft {

class BpeTokenizer {
 public:
  /// Reads a tokenizer.json; errors name the file and what in it cannot be read.
  static BpeTokenizer from_file(const std::string& path);
  /// The same from its text; `context` names it in errors.
  static BpeTokenizer from_json(const std::string& json, const std::string& context);

  /// Token ids of `text` (UTF-8; bytes that are not UTF-8 are encoded as the bytes they are).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  /// The bytes of `ids`; special tokens are left out when skip_special_tokens. An id outside the
  /// vocabulary is an ft::Error.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  /// One more than the largest id: the rows a model's embedding needs at least.
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  /// The id of a vocabulary entry or added token, or -1.
  int32_t token_id(const std::string& token) const;
  /// Whether text cut just before an ASCII letter that follows a newline that follows a visible
  /// ASCII character encodes, part by part, to the tokens of the whole: true when every split
  /// pattern is GPT-2's or Llama 3's (each then ends a piece at that newline, at the end of a
  /// text too), no prefix space is added and no added token holds a newline.
  bool splits_at_line_starts() const;
  /// The token that opens a document in training data: the template's first token (Llama 3's
  /// <|begin_of_text|>), else <|endoftext|> (GPT-2's, as llm.c's shards use it), else -1.
  int32_t document_start_token() const;
  /// The tokens the post-processor puts before and after a text (empty when it adds none).
  const std::vector<int32_t>& prefix_tokens() const { return prefix_; }
  const std::vector<int32_t>& suffix_tokens() const { return suffix_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special;
  };
  struct Merge {
    int32_t rank, merged;
  };

  /// BPE of one piece (raw bytes), appended to `out`.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  /// Steps 2 and 3 for text holding no added token.
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  std::string context_;
  std::unordered_map<std::string, int32_t> vocab_;  // byte-level token -> id
  std::vector<std::string> tokens_;                 // id -> byte-level token, or an added token's content
  std::vector<bool> special_;                       // id -> a special added token
  std::vector<bool> added_;                         // id -> an added token (decoded as its content)
  std::unordered_map<uint64_t, Merge> merges_;      // (left id << 32 | right id) -> rank and result
  std::vector<AddedToken> added_tokens_;            // longest first
  std::array<bool, 256> starts_added_{};            // whether an added token starts with this byte
  std::vector<SplitPattern> splits_;                // the pre-tokenizer's patterns, in order
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];                           // each byte's byte-level symbol id
  std::vector<int32_t> prefix_, suffix_;
};

}  // namespace ft
