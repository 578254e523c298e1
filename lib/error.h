// ft::Error and the checking helpers every layer of fusedtrain uses.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ft {

/// The one exception type of the library. Messages name the op, the shapes and what was expected.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// Out of device (or host) memory: an Error that says what was being allocated, how much was
/// free and what to try. Its own type so a caller (a benchmark trying several variants, say) can
/// tell it from a bad input and go on.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
/// "message [file.cpp:42]": what every error of the library ends with.
std::string with_location(const std::string& message, const char* file, int line);
[[noreturn]] void throw_error(const std::string& message, const char* file, int line);
}  // namespace detail

}  // namespace ft

/// FT_CHECK(cond, parts...): throws ft::Error made of the streamed parts when cond is false.
#define FT_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) ::ft::detail::throw_error(::ft::detail::concat(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)

/// FT_FAIL(parts...): throws unconditionally.
#define FT_FAIL(...) ::ft::detail::throw_error(::ft::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
