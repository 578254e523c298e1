// ft-tokenize: a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen2) applied to
// text files: each file's token ids on one line, or the text of ids given back.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "examples/common/cli.h"
#include "lib/error.h"
#include "lib/parse.h"
#include "train/data/bpe_tokenizer.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in.good(), "ft-tokenize: cannot open '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Whitespace-separated ids.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    const int64_t id = ft::parse_int64(word, what);
    FT_CHECK(id >= 0 && id <= INT32_MAX, "ft-tokenize: ", what, ": id ", id, " is out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

int run(int argc, char** argv) {
  ft::cli::Args args("ft-tokenize",
                     "Encodes text files with a Hugging Face tokenizer.json (byte-level BPE, as GPT-2, Llama 3 and\n"
                     "Qwen2 use) and prints each file's token ids on a line of its own, or decodes ids to text.\n"
                     "Its encoding equals the tokenizers package's, token for token.");
  args.flag("tokenizer", "", "the tokenizer.json to read (required)");
  args.flag("encode", "", "comma-separated text files: each one's ids on a line, space-separated");
  args.flag("decode", "", "a file of whitespace-separated ids: their text, written to stdout as bytes");
  args.flag("add-special-tokens", "0", "1: add the post-processor's tokens (Llama 3's <|begin_of_text|>) to each file");
  args.flag("skip-special-tokens", "0", "1: leave special tokens out of --decode's text");
  if (!args.parse(argc, argv)) return 0;
  FT_CHECK(!args.str("tokenizer").empty(), "ft-tokenize: --tokenizer is required (see --help)");
  FT_CHECK(args.str("encode").empty() != args.str("decode").empty(),
           "ft-tokenize: give --encode or --decode (one of them)");
  const ft::BpeTokenizer tokenizer = ft::BpeTokenizer::from_file(args.str("tokenizer"));
  if (!args.str("decode").empty()) {
    const std::string text = tokenizer.decode(parse_ids(read_file(args.str("decode")), "--decode"),
                                              args.boolean("skip-special-tokens"));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::stringstream files(args.str("encode"));
  std::string path;
  while (std::getline(files, path, ',')) {
    const std::vector<int32_t> ids = tokenizer.encode(read_file(path), args.boolean("add-special-tokens"));
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
