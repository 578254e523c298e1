#include "lib/error.h"

#include <cstring>

namespace ft::detail {

std::string with_location(const std::string& message, const char* file, int line) {
  // Only the file's base name: full build paths make messages noisy.
  const char* base = std::strrchr(file, '/');
  return concat(message, " [", base ? base + 1 : file, ":", line, "]");
}

void throw_error(const std::string& message, const char* file, int line) {
  throw Error(with_location(message, file, line));
}

}  // namespace ft::detail
