#include "lib/parse.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "lib/error.h"

namespace ft {

int64_t parse_int64(std::string_view text, const std::string& what) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  if (first != last && *first == '+') {  // std::from_chars takes no sign but '-'
    ++first;
    // ... which it would take after the '+' ("+-5").
    FT_CHECK(first == last || *first != '-', what, ": '", text, "' is not an integer");
  }
  const auto [end, ec] = std::from_chars(first, last, value);
  FT_CHECK(ec != std::errc::result_out_of_range, what, ": '", text, "' is out of range for a 64-bit integer");
  FT_CHECK(!text.empty() && ec == std::errc() && end == last, what, ": '", text, "' is not an integer");
  return value;
}

double parse_double(std::string_view text, const std::string& what) {
  // strtod (not from_chars, which GCC 11 lacks for doubles) on a copy: it needs the terminator.
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(copy.c_str(), &end);
  // strtod skips leading white space, which is no more part of the number than trailing text is.
  const bool leading_space = !copy.empty() && std::isspace(static_cast<unsigned char>(copy.front()));
  FT_CHECK(!copy.empty() && !leading_space && end == copy.c_str() + copy.size(), what, ": '", text,
           "' is not a number");
  FT_CHECK(std::isfinite(value) && errno != ERANGE, what, ": '", text, "' is not a finite number in range");
  return value;
}

}  // namespace ft
