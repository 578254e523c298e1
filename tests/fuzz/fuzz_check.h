// What every fuzz target asserts about a parser: on any input it returns a result that holds its
// documented properties, or it refuses the input with an ft::Error. Anything else (another
// exception, a crash, a sanitizer report, a property that does not hold) reaches libFuzzer, or
// the corpus replay in the test suite, as a failure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "lib/error.h"

namespace ft::fuzz {

/// Runs `parse`; true when it returned, false when it refused the input with an ft::Error.
/// Every other exception escapes: a parser may only refuse input with its own error type.
template <class Parse>
bool accepts(Parse&& parse) {
  try {
    parse();
    return true;
  } catch (const ft::Error&) {
    return false;
  }
}

/// Aborts, naming the property, when a result the parser accepted breaks it: libFuzzer then keeps
/// the input as a crash.
inline void require(bool holds, const char* property) {
  if (holds) return;
  std::fprintf(stderr, "fuzz: property violated: %s\n", property);
  std::abort();
}

inline std::string as_text(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

/// The input cut at each NUL byte: how one input carries several strings (argv, or a checkpoint's
/// files).
inline std::vector<std::string> split_on_nul(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) parts.emplace_back();
    else parts.back() += static_cast<char>(data[i]);
  }
  return parts;
}

/// A file for parsers that read a path: each input is written to it before the call. One per
/// process (libFuzzer runs inputs one after another), removed when the process ends normally.
class ScratchFile {
 public:
  ScratchFile() : path_("/tmp/ft-fuzz-" + std::to_string(::getpid()) + ".input") {}
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  /// Writes `size` bytes at `data` to the file (replacing what was there); returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    require(out.good(), "the scratch file is written");
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace ft::fuzz
