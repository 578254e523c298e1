// ft-tokenize: a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen2) applied to
// text files: each file's token ids on one line, the text of ids given back, or llm.c token
// shards written from text files on every core.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "examples/common/cli.h"
#include "lib/error.h"
#include "lib/parse.h"
#include "train/data/bpe_tokenizer.h"
#include "train/data/file_list.h"
#include "train/data/text_shards.h"
#include "train/io/text_file.h"

namespace {

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

/// The token opening each document: `flag` named, "none", or by default the tokenizer's.
int32_t document_start(const ft::BpeTokenizer& tokenizer, const std::string& flag) {
  if (flag == "none") return -1;
  if (flag.empty()) return tokenizer.document_start_token();
  const int32_t id = tokenizer.token_id(flag);
  FT_CHECK(id >= 0, "ft-tokenize: --document-start '", flag, "' is not a token of the tokenizer");
  return id;
}

int write_shards(const ft::cli::Args& args, const ft::BpeTokenizer& tokenizer) {
  const std::vector<std::string> files = ft::expand_file_list(args.str("input"), "ft-tokenize: --input");
  ft::TextShardOptions options{.folder = args.str("write-shards"),
                               .name = args.str("name"),
                               .shard_tokens = args.integer("shard-tokens", 1),
                               .val_tokens = args.integer("val-tokens", 0),
                               .threads = static_cast<int>(args.integer("threads", 0)),
                               .document_start = document_start(tokenizer, args.str("document-start")),
                               .piece_bytes = args.integer("piece-bytes", 1)};
  const auto start = std::chrono::steady_clock::now();
  const ft::TextShardSummary s = ft::write_text_shards(tokenizer, files, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ft-tokenize: %lld documents, %.1f MB of text, %lld tokens in %zu shards under %s: %.1f s, %.1f MB/s%s\n",
              static_cast<long long>(s.documents), s.text_bytes / 1e6, static_cast<long long>(s.tokens),
              s.shards.size(), options.folder.c_str(), seconds, s.text_bytes / 1e6 / std::max(seconds, 1e-9),
              tokenizer.splits_at_line_starts() ? "" : " (each file encoded whole: this tokenizer's text is not cut)");
  for (const std::string& shard : s.shards) std::printf("  %s\n", shard.c_str());
  return 0;
}

int run(int argc, char** argv) {
  ft::cli::Args args("ft-tokenize",
                     "Encodes text files with a Hugging Face tokenizer.json (byte-level BPE, as GPT-2, Llama 3 and\n"
                     "Qwen2 use) and prints each file's token ids on a line of its own, decodes ids to text, or\n"
                     "writes llm.c token shards of text files on every core (uint16 tokens for a vocabulary up\n"
                     "to 65,536, else llm.c's Llama 3 form with uint32). Its encoding equals the tokenizers\n"
                     "package's, token for token.");
  args.flag("tokenizer", "", "the tokenizer.json to read (required)");
  args.flag("encode", "", "comma-separated text files: each one's ids on a line, space-separated");
  args.flag("decode", "", "a file of whitespace-separated ids: their text, written to stdout as bytes");
  args.flag("add-special-tokens", "0", "1: add the post-processor's tokens (Llama 3's <|begin_of_text|>) to each file");
  args.flag("skip-special-tokens", "0", "1: leave special tokens out of --decode's text");
  args.flag("write-shards", "", "a folder: write llm.c token shards of the --input files there, on every core");
  args.flag("input", "", "with --write-shards: comma-separated text files or glob patterns, one document each");
  args.flag("name", "text", "with --write-shards: the shards' names, NAME_val_000000.bin, NAME_train_000001.bin, ...");
  args.flag("shard-tokens", "100000000", "with --write-shards: tokens a training shard holds");
  args.flag("val-tokens", "0", "with --write-shards: the first tokens, written to the val shard (0: none)");
  args.flag("threads", "0", "with --write-shards: threads encoding (0: every core)");
  args.flag("piece-bytes", "1048576", "with --write-shards: text one thread encodes at a time (cut at line starts)");
  args.flag("document-start", "", "with --write-shards: the token opening each document, or none (default: the\n"
            "template's first token, Llama 3's <|begin_of_text|>, else <|endoftext|> as llm.c's GPT-2 shards)");
  if (!args.parse(argc, argv)) return 0;
  FT_CHECK(!args.str("tokenizer").empty(), "ft-tokenize: --tokenizer is required (see --help)");
  const int modes = !args.str("encode").empty() + !args.str("decode").empty() + !args.str("write-shards").empty();
  FT_CHECK(modes == 1, "ft-tokenize: give one of --encode, --decode and --write-shards");
  FT_CHECK(args.str("write-shards").empty() == args.str("input").empty(),
           "ft-tokenize: --write-shards and --input go together");
  const ft::BpeTokenizer tokenizer = ft::BpeTokenizer::from_file(args.str("tokenizer"));
  if (!args.str("write-shards").empty()) return write_shards(args, tokenizer);
  if (!args.str("decode").empty()) {
    const std::string text = tokenizer.decode(parse_ids(ft::read_text_file(args.str("decode"), "ft-tokenize"), "--decode"),
                                              args.boolean("skip-special-tokens"));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::stringstream files(args.str("encode"));
  std::string path;
  while (std::getline(files, path, ',')) {
    const std::vector<int32_t> ids = tokenizer.encode(ft::read_text_file(path, "ft-tokenize"), args.boolean("add-special-tokens"));
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
