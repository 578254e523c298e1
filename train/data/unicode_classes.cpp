#include "train/data/unicode_classes.h"

#include <algorithm>
#include <iterator>

namespace ft {

namespace {

struct CodePointRange {
  char32_t first, last;
};

#include "train/data/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], char32_t c) {
  // The first range whose last code point is at least c.
  const CodePointRange* r = std::lower_bound(std::begin(ranges), std::end(ranges), c,
                                             [](const CodePointRange& range, char32_t x) { return range.last < x; });
  return r != std::end(ranges) && r->first <= c;
}

}  // namespace

bool is_unicode_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return in_ranges(kLetterRanges, c);
}

bool is_unicode_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(kNumberRanges, c);
}

bool is_unicode_whitespace(char32_t c) {
  // PropList.txt's White_Space, which Oniguruma's \s follows.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace ft
