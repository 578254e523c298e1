// A whole small file read as text (configs, tokenizer and adapter JSON, indexes).
#pragma once
#include <string>

namespace ft {

/// The bytes of `path`. A file that cannot be opened or read is an ft::Error starting with `who`
/// and naming the file: "<who>: cannot open '<path>'".
std::string read_text_file(const std::string& path, const std::string& who);

}  // namespace ft
