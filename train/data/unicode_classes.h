// The character classes a tokenizer's split pattern asks about: Unicode letters (\p{L}), numbers
// (\p{N}) and white space (\s, Unicode's White_Space property, as Oniguruma reads \s), from
// tables generated out of Python's unicodedata (scripts/dev/unicode_tables.py). A code point
// standing for a byte that is not UTF-8 (lib/utf8.h) is none of them.
#pragma once

namespace ft {

bool is_unicode_letter(char32_t c);
bool is_unicode_number(char32_t c);
bool is_unicode_whitespace(char32_t c);

}  // namespace ft
