// UTF-8 in and out, for text read as code points (a tokenizer's pre-tokenizer, JSON's \u
// escapes). Decoding never fails: a byte that does not start a well-formed sequence (a stray
// continuation byte, an overlong or truncated sequence, a surrogate, past U+10FFFF) reads as one
// code point of its own, kInvalidByte + the byte, outside Unicode, so text that is not UTF-8
// still splits into pieces and keeps every byte.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace ft {

/// Code points from kInvalidByte to kInvalidByte + 255 stand for bytes that are not UTF-8.
inline constexpr char32_t kInvalidByte = 0x110000;

/// Appends code point `c` (at most U+10FFFF, not a surrogate) to `out` in UTF-8.
inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

/// The code point starting at byte `at` of `text` and its length in bytes (1 for a byte that is
/// not UTF-8, read as kInvalidByte + the byte).
struct DecodedCodePoint {
  char32_t code;
  size_t bytes;
};
inline DecodedCodePoint decode_utf8_at(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(at);
  const DecodedCodePoint invalid{kInvalidByte + b0, 1};
  if (b0 < 0x80) return {b0, 1};
  size_t length = 0;
  char32_t code = 0;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, code = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, code = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, code = b0 & 0x07;
  } else {
    return invalid;
  }
  if (at + length > text.size()) return invalid;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return invalid;
    code = (code << 6) | (byte(at + i) & 0x3F);
  }
  constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};  // below these: overlong
  if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return invalid;
  return {code, length};
}

}  // namespace ft
