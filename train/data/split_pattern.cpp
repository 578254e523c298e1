#include "train/data/split_pattern.h"

#include <cstdint>
#include <limits>

#include "lib/error.h"
#include "lib/utf8.h"
#include "train/data/unicode_classes.h"

namespace ft {

namespace {

// The classes a set may hold (bit flags).
constexpr uint8_t kLetter = 1, kNumber = 2, kSpace = 4;
constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();

bool in_classes(uint8_t classes, char32_t c) {
  return ((classes & kLetter) && is_unicode_letter(c)) || ((classes & kNumber) && is_unicode_number(c)) ||
         ((classes & kSpace) && is_unicode_whitespace(c));
}

bool outside_classes(uint8_t classes, char32_t c) {
  return ((classes & kLetter) && !is_unicode_letter(c)) || ((classes & kNumber) && !is_unicode_number(c)) ||
         ((classes & kSpace) && !is_unicode_whitespace(c));
}

}  // namespace

/// A callable passed down by reference, with no allocation (the matcher's continuations).
class SplitPattern::Continuation {
 public:
  template <class F>
  Continuation(const F& f)  // NOLINT: made implicitly from the lambdas below
      : object_(&f), call_([](const void* object, size_t at) { return (*static_cast<const F*>(object))(at); }) {}
  bool operator()(size_t at) const { return call_(object_, at); }

 private:
  const void* object_;
  bool (*call_)(const void*, size_t);
};

SplitPattern::SplitPattern(const std::string& pattern) : pattern_(pattern) {
  root_ = parse_alternation();
  if (at_ != pattern_.size()) fail("an unmatched ')'");
}

void SplitPattern::fail(const std::string& what) const {
  FT_FAIL("split pattern '", pattern_, "' at byte ", at_, ": ", what);
}

int SplitPattern::add(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<int>(nodes_.size()) - 1;
}

int SplitPattern::add_parts(Node::Kind kind, std::vector<int> parts) {
  if (parts.size() == 1) return parts.front();
  Node node;
  node.kind = kind;
  node.parts = std::move(parts);
  return add(std::move(node));
}

char32_t SplitPattern::next_code_point() {
  const DecodedCodePoint d = decode_utf8_at(pattern_, at_);
  if (d.code >= kInvalidByte) fail("the pattern is not UTF-8");
  at_ += d.bytes;
  return d.code;
}

int SplitPattern::parse_alternation() {
  std::vector<int> alternatives{parse_sequence()};
  while (at_ < pattern_.size() && pattern_[at_] == '|') {
    ++at_;
    alternatives.push_back(parse_sequence());
  }
  return add_parts(Node::Kind::Alternation, std::move(alternatives));
}

int SplitPattern::parse_sequence() {
  std::vector<int> parts;
  while (at_ < pattern_.size() && pattern_[at_] != '|' && pattern_[at_] != ')') {
    const int atom = parse_atom();
    if (at_ >= pattern_.size() || std::string_view("*+?{").find(pattern_[at_]) == std::string_view::npos) {
      parts.push_back(atom);
      continue;
    }
    Node repeat;
    repeat.kind = Node::Kind::Repeat;
    repeat.parts = {atom};
    const char q = pattern_[at_++];
    if (q == '*') {
      repeat.min = 0, repeat.max = kUnbounded;
    } else if (q == '+') {
      repeat.min = 1, repeat.max = kUnbounded;
    } else if (q == '?') {
      repeat.min = 0, repeat.max = 1;
    } else {  // {n}, {n,} or {n,m}
      auto number = [&] {
        size_t n = 0, digits = 0;
        for (; at_ < pattern_.size() && pattern_[at_] >= '0' && pattern_[at_] <= '9' && digits < 6; ++at_, ++digits)
          n = n * 10 + static_cast<size_t>(pattern_[at_] - '0');
        if (digits == 0) fail("a '{' that does not start a count {n}, {n,} or {n,m}");
        return n;
      };
      repeat.min = repeat.max = number();
      if (at_ < pattern_.size() && pattern_[at_] == ',') {
        ++at_;
        repeat.max = at_ < pattern_.size() && pattern_[at_] == '}' ? kUnbounded : number();
      }
      if (at_ >= pattern_.size() || pattern_[at_] != '}' || repeat.max < repeat.min) fail("a malformed count {n,m}");
      ++at_;
    }
    if (at_ < pattern_.size() && pattern_[at_] == '?') {
      repeat.greedy = false;
      ++at_;
    } else if (at_ < pattern_.size() && pattern_[at_] == '+') {
      fail("a possessive quantifier");
    }
    parts.push_back(add(std::move(repeat)));
  }
  return add_parts(Node::Kind::Sequence, std::move(parts));
}

int SplitPattern::parse_atom() {
  const char c = pattern_[at_];
  if (c == '(') return parse_group();
  if (c == '[') return parse_class();
  if (c == '^' || c == '$') fail("an anchor");
  if (std::string_view("*+?{").find(c) != std::string_view::npos) fail("a quantifier with nothing to repeat");
  Node set;
  set.case_insensitive = case_insensitive_;
  if (c == '.') {
    ++at_;
    set.negated = true;
    set.ranges.push_back({'\n', '\n'});
  } else if (c == '\\') {
    ++at_;
    parse_escape(set.ranges, set.classes, set.negated_classes);
  } else {
    const char32_t cp = next_code_point();
    set.ranges.push_back({cp, cp});
  }
  return add(std::move(set));
}

int SplitPattern::parse_group() {
  ++at_;  // (
  const bool saved_case = case_insensitive_;
  bool lookahead = false, negative = false;
  const std::string_view rest = std::string_view(pattern_).substr(at_);
  if (rest.starts_with("?:")) {
    at_ += 2;
  } else if (rest.starts_with("?i:")) {
    at_ += 3;
    case_insensitive_ = true;
  } else if (rest.starts_with("?=") || rest.starts_with("?!")) {
    lookahead = true;
    negative = rest[1] == '!';
    at_ += 2;
  } else if (rest.starts_with("?")) {
    fail("the group '(" + std::string(rest.substr(0, 2)) + "'");
  }
  const int body = parse_alternation();
  case_insensitive_ = saved_case;
  if (at_ >= pattern_.size() || pattern_[at_] != ')') fail("a missing ')'");
  ++at_;
  if (!lookahead) return body;
  Node look;
  look.kind = Node::Kind::Lookahead;
  look.parts = {body};
  look.negative = negative;
  return add(std::move(look));
}

int SplitPattern::parse_class() {
  ++at_;  // [
  Node set;
  set.case_insensitive = case_insensitive_;
  if (at_ < pattern_.size() && pattern_[at_] == '^') {
    set.negated = true;
    ++at_;
  }
  for (bool first = true;; first = false) {
    if (at_ >= pattern_.size()) fail("a missing ']'");
    const char c = pattern_[at_];
    if (c == ']' && !first) {
      ++at_;
      break;
    }
    if (c == '[') fail("a class inside a class");
    if (c == '\\') {
      ++at_;
      parse_escape(set.ranges, set.classes, set.negated_classes);
      continue;
    }
    const char32_t low = next_code_point();
    char32_t high = low;
    if (at_ + 1 < pattern_.size() && pattern_[at_] == '-' && pattern_[at_ + 1] != ']') {
      ++at_;
      if (pattern_[at_] == '\\') fail("an escape ending a range");
      high = next_code_point();
      if (high < low) fail("a range whose end comes before its start");
    }
    set.ranges.push_back({low, high});
  }
  return add(std::move(set));
}

void SplitPattern::parse_escape(std::vector<std::pair<char32_t, char32_t>>& ranges, uint8_t& classes,
                                uint8_t& negated_classes) {
  if (at_ >= pattern_.size()) fail("a trailing backslash");
  const char e = pattern_[at_++];
  auto literal = [&](char32_t c) { ranges.push_back({c, c}); };
  switch (e) {
    case 's': classes |= kSpace; return;
    case 'S': negated_classes |= kSpace; return;
    case 'r': return literal('\r');
    case 'n': return literal('\n');
    case 't': return literal('\t');
    case 'f': return literal('\f');
    case 'v': return literal('\v');
    case 'p':
    case 'P': {
      const size_t close = pattern_.find('}', at_);
      if (at_ >= pattern_.size() || pattern_[at_] != '{' || close == std::string::npos) fail("\\p without {name}");
      const std::string name = pattern_.substr(at_ + 1, close - at_ - 1);
      const uint8_t flag = name == "L" ? kLetter : name == "N" ? kNumber : 0;
      if (!flag) fail("the property \\" + std::string(1, e) + "{" + name + "} (only L and N are)");
      at_ = close + 1;
      (e == 'p' ? classes : negated_classes) |= flag;
      return;
    }
    default:
      // An escaped mark stands for itself; a letter or digit would be a class or reference we lack.
      if ((e >= 0x21 && e <= 0x2F) || (e >= 0x3A && e <= 0x40) || (e >= 0x5B && e <= 0x60) || (e >= 0x7B && e <= 0x7E) ||
          e == ' ')
        return literal(static_cast<char32_t>(e));
      fail("the escape \\" + std::string(1, e));
  }
}

bool SplitPattern::matches_one(const Node& n, char32_t c) const {
  auto in_ranges = [&](char32_t x) {
    for (const auto& [low, high] : n.ranges)
      if (x >= low && x <= high) return true;
    return false;
  };
  bool in = in_ranges(c);
  if (!in && n.case_insensitive && c < 0x80) {
    const char32_t other = c >= 'a' && c <= 'z' ? c - 32 : c >= 'A' && c <= 'Z' ? c + 32 : c;
    in = other != c && in_ranges(other);
  }
  if (!in && n.classes) in = in_classes(n.classes, c);
  if (!in && n.negated_classes) in = outside_classes(n.negated_classes, c);
  return in != n.negated;
}

bool SplitPattern::match(int id, const std::u32string& text, size_t at, const Continuation& next) const {
  const Node& n = nodes_[static_cast<size_t>(id)];
  switch (n.kind) {
    case Node::Kind::Set:
      return at < text.size() && matches_one(n, text[at]) && next(at + 1);
    case Node::Kind::Sequence:
      return match_sequence(id, 0, text, at, next);
    case Node::Kind::Alternation:
      for (int part : n.parts)
        if (match(part, text, at, next)) return true;
      return false;
    case Node::Kind::Repeat: {
      const Node& body = nodes_[static_cast<size_t>(n.parts[0])];
      if (body.kind != Node::Kind::Set) return match_repeat(id, 0, text, at, next);
      // One code point a time (every repeat in the tokenizers' patterns): measure the run, then
      // try its lengths, without recursing once per code point.
      size_t run = 0;
      while (run < n.max && at + run < text.size() && matches_one(body, text[at + run])) ++run;
      if (run < n.min) return false;
      if (n.greedy) {
        for (size_t k = run + 1; k-- > n.min;)
          if (next(at + k)) return true;
      } else {
        for (size_t k = n.min; k <= run; ++k)
          if (next(at + k)) return true;
      }
      return false;
    }
    case Node::Kind::Lookahead: {
      const bool found = match(n.parts[0], text, at, [](size_t) { return true; });
      return found != n.negative && next(at);
    }
  }
  return false;
}

bool SplitPattern::match_sequence(int id, size_t part, const std::u32string& text, size_t at,
                                  const Continuation& next) const {
  const Node& n = nodes_[static_cast<size_t>(id)];
  if (part == n.parts.size()) return next(at);
  return match(n.parts[part], text, at,
               [&](size_t after) { return match_sequence(id, part + 1, text, after, next); });
}

bool SplitPattern::match_repeat(int id, size_t count, const std::u32string& text, size_t at,
                                const Continuation& next) const {
  const Node& n = nodes_[static_cast<size_t>(id)];
  auto more = [&] {
    // A repetition that consumed nothing would loop forever: it does not count.
    return count < n.max && match(n.parts[0], text, at, [&](size_t after) {
             return after != at && match_repeat(id, count + 1, text, after, next);
           });
  };
  auto enough = [&] { return count >= n.min && next(at); };
  return n.greedy ? more() || enough() : enough() || more();
}

std::vector<std::pair<size_t, size_t>> SplitPattern::find_all(const std::u32string& text) const {
  std::vector<std::pair<size_t, size_t>> found;
  size_t from = 0;
  while (from < text.size()) {
    bool matched = false;
    for (size_t start = from; start < text.size() && !matched; ++start) {
      size_t end = start;
      if (match(root_, text, start, [&](size_t e) { end = e; return true; }) && end > start) {
        found.push_back({start, end});
        from = end;
        matched = true;
      }
    }
    if (!matched) break;
  }
  return found;
}

}  // namespace ft
