// Strict numbers from text (flags, checkpoint metadata, saved data positions): the whole string
// must be the number, in range, and finite. "2x", "", a 20-digit count or "nan" is an ft::Error
// naming `what` (the flag or the file's field), never a silently truncated value or an uncaught
// std::out_of_range.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace ft {

int64_t parse_int64(std::string_view text, const std::string& what);
/// Finite only (NaN and infinities are refused).
double parse_double(std::string_view text, const std::string& what);

}  // namespace ft
