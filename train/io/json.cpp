#include "train/io/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "lib/error.h"
#include "lib/utf8.h"

namespace ft {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(const std::string& text, const std::string& context, JsonScalars scalars)
      : s_(text), context_(context), scalars_(scalars) {}

  JsonValue parse_document() {
    JsonValue v = parse_value(0);
    skip_space();
    check(i_ == s_.size(), "unexpected text after the JSON value");
    return v;
  }

 private:
  void check(bool ok, const char* what) const { FT_CHECK(ok, context_, " at byte ", i_, ": ", what); }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    skip_space();
    check(i_ < s_.size() && s_[i_] == c, "unexpected character");
    ++i_;
  }
  bool take_word(const char* word) {
    const std::string w(word);
    if (s_.compare(i_, w.size(), w) != 0) return false;
    i_ += w.size();
    return true;
  }

  // The comma-separated elements of an array or object from its opening bracket to `close`;
  // parse_element reads one.
  template <class F>
  void parse_sequence(char close, const char* ends_inside, F&& parse_element) {
    ++i_;
    skip_space();
    if (i_ < s_.size() && s_[i_] == close) {
      ++i_;
      return;
    }
    while (true) {
      parse_element();
      skip_space();
      check(i_ < s_.size(), ends_inside);
      if (s_[i_] == close) {
        ++i_;
        return;
      }
      expect(',');
    }
  }

  JsonValue parse_value(int depth) {
    check(depth < 8, "nesting too deep");
    skip_space();
    check(i_ < s_.size(), "the text ends early");
    const char c = s_[i_];
    JsonValue v;
    if (c == '"') {
      v.kind = JsonValue::Kind::String;
      v.text = parse_string();
      return v;
    }
    if (c == '[') {
      v.kind = JsonValue::Kind::Array;
      parse_sequence(']', "the text ends inside an array", [&] { v.items.push_back(parse_value(depth + 1)); });
      return v;
    }
    if (c == '{') {
      v.kind = JsonValue::Kind::Object;
      parse_sequence('}', "the text ends inside an object", [&] {
        skip_space();
        check(i_ < s_.size() && s_[i_] == '"', "expected a key");
        std::string key = parse_string();
        expect(':');
        v.members.emplace_back(std::move(key), parse_value(depth + 1));
      });
      return v;
    }
    if (scalars_ == JsonScalars::All) {
      for (const bool b : {true, false})
        if (take_word(b ? "true" : "false")) {
          v.kind = JsonValue::Kind::Bool;
          v.boolean = b;
          return v;
        }
      if (take_word("null")) return v;
    }
    check(c == '-' || is_digit(c), scalars_ == JsonScalars::All ? "expected a JSON value"
                                                                  : "expected a string, integer, array or object");
    return parse_number();
  }

  // -?digits, then (JsonScalars::All only) an optional .digits and e[+-]digits. The token must
  // convert whole and in range: std::from_chars reports both, and nothing is read past it.
  JsonValue parse_number() {
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    const size_t digits = i_;
    while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
    check(i_ > digits, "bad number");
    bool integral = true;
    if (scalars_ == JsonScalars::All) {
      if (i_ < s_.size() && s_[i_] == '.') {
        integral = false;
        const size_t fraction = ++i_;
        while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
        check(i_ > fraction, "bad number: no digits after '.'");
      }
      if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        integral = false;
        ++i_;
        if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
        const size_t exponent = i_;
        while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
        check(i_ > exponent, "bad number: no digits in the exponent");
      }
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + i_;
    JsonValue v;
    if (integral) {
      v.kind = JsonValue::Kind::Integer;
      const auto [end, ec] = std::from_chars(first, last, v.integer);
      check(ec == std::errc() && end == last, "integer out of range");
      v.number = static_cast<double>(v.integer);
    } else {
      v.kind = JsonValue::Kind::Number;
      const auto [end, ec] = std::from_chars(first, last, v.number);
      check(ec == std::errc() && end == last && std::isfinite(v.number), "number out of range");
    }
    return v;
  }

  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      check(i_ < s_.size(), "unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      check(i_ < s_.size(), "unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          char32_t code = parse_hex4();
          if (code >= 0xD800 && code <= 0xDBFF) {  // a high surrogate: its low half must follow
            check(i_ + 2 <= s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u', "unpaired surrogate in a \\u escape");
            i_ += 2;
            const char32_t low = parse_hex4();
            check(low >= 0xDC00 && low <= 0xDFFF, "unpaired surrogate in a \\u escape");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else {
            check(code < 0xDC00 || code > 0xDFFF, "unpaired surrogate in a \\u escape");
          }
          append_utf8(out, code);
          break;
        }
        default: check(false, "unknown escape");
      }
    }
  }

  /// The 4 hex digits of a \\u escape.
  char32_t parse_hex4() {
    check(i_ + 4 <= s_.size(), "short \\u escape");
    unsigned code = 0;
    const auto [end, ec] = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, code, 16);
    check(ec == std::errc() && end == s_.data() + i_ + 4, "bad \\u escape");
    i_ += 4;
    return code;
  }

  const std::string& s_;
  const std::string& context_;
  const JsonScalars scalars_;
  size_t i_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& [name, value] : members)
    if (name == key) return &value;
  return nullptr;
}

JsonValue parse_json(const std::string& text, const std::string& context, JsonScalars scalars) {
  return Parser(text, context, scalars).parse_document();
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_number(double x) {
  FT_CHECK(std::isfinite(x), "json_number: ", x, " has no JSON form");
  char buf[32];
  // The shortest form writes an integral double past int64 (9.3e18) as bare digits, which
  // parse_json reads as an Integer out of range; an exponent makes it read back as a Number.
  const bool past_int64 = std::fabs(x) >= 0x1p63;
  const auto [end, ec] = past_int64 ? std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific)
                                    : std::to_chars(buf, buf + sizeof buf, x);
  FT_CHECK(ec == std::errc(), "json_number: cannot format ", x);
  return std::string(buf, end);
}

}  // namespace ft
