// The regular expressions Hugging Face tokenizers split text with before BPE (GPT-2's byte-level
// pattern, Llama 3's and Qwen2's `Split` patterns), matched as their Oniguruma engine matches
// them: a backtracking matcher, leftmost alternative first, greedy quantifiers longest first.
//
// The subset: literals; `.` (not a newline); classes `[...]` with ranges and `^`; the escapes
// \s \S (White_Space), \p{L} \p{N} \P{L} \P{N}, \r \n \t \f \v and an escaped punctuation mark;
// groups (...) (?:...) and (?i:...) (ASCII case-insensitive); lookahead (?=...) (?!...); `|`;
// and the quantifiers * + ? {n} {n,} {n,m}, greedy or lazy (a trailing ?). Anything else (an
// anchor, a back-reference, another property) is an ft::Error naming it, never a silent
// mismatch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft {

class SplitPattern {
 public:
  /// Parses `pattern` (UTF-8).
  explicit SplitPattern(const std::string& pattern);

  /// The matches in `text` (code points), left to right, without overlap: each search starts
  /// where the last match ended, at the leftmost position a match starts. [begin, end) indices;
  /// an empty match is skipped.
  std::vector<std::pair<size_t, size_t>> find_all(const std::u32string& text) const;
  const std::string& source() const { return pattern_; }

 private:
  struct Node {
    enum class Kind { Set, Sequence, Alternation, Repeat, Lookahead };
    Kind kind = Kind::Set;
    // Set: one code point, in `ranges` or the classes (negated_classes: outside one of them),
    // or, when `negated`, in none of them.
    std::vector<std::pair<char32_t, char32_t>> ranges;
    uint8_t classes = 0, negated_classes = 0;
    bool negated = false, case_insensitive = false;
    std::vector<int> parts;   // Sequence and Alternation: their parts; Repeat and Lookahead: parts[0]
    size_t min = 0, max = 0;  // Repeat
    bool greedy = true;       // Repeat
    bool negative = false;    // Lookahead: (?!...)
  };

  int parse_alternation();
  int parse_sequence();
  int parse_atom();
  int parse_group();
  int parse_class();
  /// After a backslash: adds what it stands for to `ranges` (a code point) or `classes`.
  void parse_escape(std::vector<std::pair<char32_t, char32_t>>& ranges, uint8_t& classes, uint8_t& negated_classes);
  char32_t next_code_point();
  int add(Node node);
  /// A Sequence or Alternation of `parts`, or the one part alone.
  int add_parts(Node::Kind kind, std::vector<int> parts);
  [[noreturn]] void fail(const std::string& what) const;

  // Matching continues with `next`, what must match after the node (continuation passing: the
  // backtracking falls out of returning false).
  class Continuation;
  bool match(int node, const std::u32string& text, size_t at, const Continuation& next) const;
  bool match_sequence(int node, size_t part, const std::u32string& text, size_t at, const Continuation& next) const;
  bool match_repeat(int node, size_t count, const std::u32string& text, size_t at, const Continuation& next) const;
  bool matches_one(const Node& n, char32_t c) const;

  std::string pattern_;
  size_t at_ = 0;              // the parser's byte position
  bool case_insensitive_ = false;
  std::vector<Node> nodes_;
  int root_ = -1;
};

}  // namespace ft
