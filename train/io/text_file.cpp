#include "train/io/text_file.h"

#include <fstream>
#include <sstream>

#include "lib/error.h"

namespace ft {

std::string read_text_file(const std::string& path, const std::string& who) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in.good(), who, ": cannot open '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  FT_CHECK(!in.bad(), who, ": cannot read '", path, "'");
  return text.str();
}

}  // namespace ft
