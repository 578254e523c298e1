#include "train/data/text_shards.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "lib/error.h"
#include "train/data/token_shards.h"
#include "train/io/text_file.h"

namespace ft {

namespace {

constexpr int64_t kBlockBytes = int64_t{64} << 20;  // text read from a file at a time

/// Whether `text` may be cut before byte i: an ASCII letter after a newline after a visible ASCII
/// character. A newline after white space would not do: GPT-2's \s+(?!\S) leaves a run's last
/// white space to the next piece when a letter follows, and keeps the run whole at the end of a
/// text, so "a \r\nb" and "a \r\n" + "b" would split differently.
bool is_cut_point(const std::string& text, size_t i) {
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  return i >= 2 && i < text.size() && letter(text[i]) && text[i - 1] == '\n' && text[i - 2] > ' ' && text[i - 2] < 0x7F;
}

/// The last allowed cut in `text` (0 when there is none).
size_t last_cut_point(const std::string& text) {
  for (size_t i = text.size(); i-- > 2;)
    if (is_cut_point(text, i)) return i;
  return 0;
}

/// A stretch of text encoded as one piece of work; `opens` a document: its start token goes first.
struct Piece {
  std::string text;
  bool opens = false;
};

/// Where the tokens go: the val shard first, then training shards of shard_tokens each.
class ShardSink {
 public:
  ShardSink(const TextShardOptions& options, int64_t vocab_size, TextShardSummary& summary)
      : options_(options), vocab_size_(vocab_size), summary_(summary) {}

  void add(const std::vector<int32_t>& tokens) {
    for (const int32_t t : tokens) {
      const bool val = summary_.tokens < options_.val_tokens;
      std::vector<uint32_t>& buffer = val ? val_ : train_;
      buffer.push_back(static_cast<uint32_t>(t));
      ++summary_.tokens;
      if (val && summary_.tokens == options_.val_tokens) flush(val_, "val", 0);
      if (!val && static_cast<int64_t>(train_.size()) == options_.shard_tokens) flush(train_, "train", ++train_shards_);
    }
  }
  void finish() {
    if (!val_.empty()) flush(val_, "val", 0);
    if (!train_.empty()) flush(train_, "train", ++train_shards_);
  }

 private:
  void flush(std::vector<uint32_t>& buffer, const char* split, int index) {
    char name[64];
    std::snprintf(name, sizeof name, "_%s_%06d.bin", split, index);
    const std::string path = (std::filesystem::path(options_.folder) / (options_.name + name)).string();
    write_token_shard(path, buffer, vocab_size_);
    summary_.shards.push_back(path);
    buffer.clear();
  }

  const TextShardOptions& options_;
  int64_t vocab_size_;
  TextShardSummary& summary_;
  std::vector<uint32_t> val_, train_;
  int train_shards_ = 0;
};

/// Encodes the pieces on `threads` threads; the tokens in the pieces' order.
std::vector<std::vector<int32_t>> encode_pieces(const BpeTokenizer& tokenizer, const std::vector<Piece>& pieces,
                                                int32_t document_start, int threads) {
  std::vector<std::vector<int32_t>> tokens(pieces.size());
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto work = [&](size_t worker) {
    try {
      for (size_t i = next++; i < pieces.size(); i = next++) {
        if (pieces[i].opens && document_start >= 0) tokens[i].push_back(document_start);
        const std::vector<int32_t> ids = tokenizer.encode(pieces[i].text);
        tokens[i].insert(tokens[i].end(), ids.begin(), ids.end());
      }
    } catch (...) {
      errors[worker] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w) pool.emplace_back(work, static_cast<size_t>(w));
  work(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return tokens;
}

}  // namespace

std::string cached_text_shards(const BpeTokenizer& tokenizer, const std::string& tokenizer_path,
                               const std::vector<std::string>& files, const std::string& cache_root,
                               const std::string& name) {
  // FNV-1a over what the shards depend on.
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&](const std::string& bytes) {
    for (const char c : bytes) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    hash = (hash ^ 0xFF) * 0x100000001b3ull;  // a separator, so that "ab"+"c" differs from "a"+"bc"
  };
  mix(read_text_file(tokenizer_path, "cached_text_shards"));
  mix(name);
  for (const std::string& file : files) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    FT_CHECK(!ec, "cached_text_shards: cannot read '", file, "': ", ec.message());
    const auto written = std::filesystem::last_write_time(file, ec).time_since_epoch().count();
    mix(std::filesystem::absolute(file).string() + "|" + std::to_string(size) + "|" + std::to_string(written));
  }
  char folder_name[32];
  std::snprintf(folder_name, sizeof folder_name, "%016llx", static_cast<unsigned long long>(hash));
  const std::filesystem::path folder = std::filesystem::path(cache_root) / folder_name;
  const std::string pattern = (folder / (name + "_*.bin")).string();
  if (std::filesystem::is_directory(folder)) return pattern;
  const std::string staging = folder.string() + ".tmp." + std::to_string(::getpid());
  std::filesystem::remove_all(staging);
  write_text_shards(tokenizer, files,
                    {.folder = staging, .name = name, .document_start = tokenizer.document_start_token()});
  std::error_code ec;
  std::filesystem::rename(staging, folder, ec);
  // Another process may have finished the same folder first: theirs holds the same tokens.
  if (ec && !std::filesystem::is_directory(folder))
    FT_FAIL("cached_text_shards: cannot move '", staging, "' to '", folder.string(), "': ", ec.message());
  std::filesystem::remove_all(staging);
  return pattern;
}

std::vector<size_t> line_start_cuts(const std::string& text, int64_t piece_bytes) {
  std::vector<size_t> cuts;
  for (size_t from = static_cast<size_t>(std::max<int64_t>(piece_bytes, 1)); from < text.size();) {
    size_t at = from;
    while (at < text.size() && !is_cut_point(text, at)) ++at;
    if (at >= text.size()) break;
    cuts.push_back(at);
    from = at + static_cast<size_t>(std::max<int64_t>(piece_bytes, 1));
  }
  return cuts;
}

TextShardSummary write_text_shards(const BpeTokenizer& tokenizer, const std::vector<std::string>& files,
                                   const TextShardOptions& options) {
  FT_CHECK(options.shard_tokens >= 1, "write_text_shards: shard_tokens must be at least 1, got ", options.shard_tokens);
  FT_CHECK(options.val_tokens >= 0, "write_text_shards: val_tokens must not be negative, got ", options.val_tokens);
  FT_CHECK(!options.name.empty() && options.name.find('/') == std::string::npos,
           "write_text_shards: the shards' name must be a plain file name, got '", options.name, "'");
  std::error_code ec;
  std::filesystem::create_directories(options.folder, ec);
  FT_CHECK(!ec, "write_text_shards: cannot create the folder '", options.folder, "': ", ec.message());
  const int threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  const bool cut = tokenizer.splits_at_line_starts();
  TextShardSummary summary;
  ShardSink sink(options, tokenizer.vocab_size(), summary);
  std::vector<Piece> pending;
  int64_t pending_bytes = 0;
  auto drain = [&] {
    for (const std::vector<int32_t>& tokens : encode_pieces(tokenizer, pending, options.document_start, threads))
      sink.add(tokens);
    pending.clear();
    pending_bytes = 0;
  };
  auto queue = [&](std::string text, bool opens) {
    pending_bytes += static_cast<int64_t>(text.size());
    if (!cut) {
      pending.push_back({std::move(text), opens});
    } else {
      size_t begin = 0;
      for (const size_t at : line_start_cuts(text, options.piece_bytes)) {
        pending.push_back({text.substr(begin, at - begin), opens && begin == 0});
        begin = at;
      }
      pending.push_back({text.substr(begin), opens && begin == 0});
    }
    // Cut tokenizers gather a block's pieces for the threads; whole files gather as many
    // files as there are threads.
    if (cut ? pending_bytes >= kBlockBytes : static_cast<int>(pending.size()) >= threads) drain();
  };
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    FT_CHECK(in.good(), "write_text_shards: cannot open '", path, "'");
    ++summary.documents;
    bool opens = true;
    std::string carry;
    std::vector<char> block(static_cast<size_t>(cut ? kBlockBytes : 0));
    while (true) {
      std::string text;
      bool last = true;
      if (cut) {
        in.read(block.data(), static_cast<std::streamsize>(block.size()));
        FT_CHECK(!in.bad(), "write_text_shards: cannot read '", path, "'");
        text = std::move(carry) + std::string(block.data(), static_cast<size_t>(in.gcount()));
        last = in.eof();
        carry.clear();
        if (!last) {  // keep the text after the last cut for the next block
          const size_t at = last_cut_point(text);
          carry = text.substr(at);
          text.resize(at);
        }
      } else {
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        FT_CHECK(!in.bad(), "write_text_shards: cannot read '", path, "'");
      }
      summary.text_bytes += static_cast<int64_t>(text.size());
      if (!text.empty() || opens) queue(std::move(text), opens);
      opens = false;
      if (last) break;
    }
  }
  drain();
  sink.finish();
  return summary;
}

}  // namespace ft
