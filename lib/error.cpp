#include "lib/error.h"

#include <cstring>

namespace ft::detail {

void throw_error(const std::string& message, const char* file, int line) {
  // Only the file's base name: full build paths make messages noisy.
  const char* base = std::strrchr(file, '/');
  throw Error(concat(message, " [", base ? base + 1 : file, ":", line, "]"));
}

}  // namespace ft::detail
