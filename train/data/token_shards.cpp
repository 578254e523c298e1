#include "train/data/token_shards.h"


#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "lib/error.h"
#include "train/data/file_list.h"
#include "lib/parse.h"
#include "train/data/token_shard_format.h"
#include "train/io/atomic_file.h"

namespace ft {

namespace {

int64_t file_bytes(const std::string& path) {
  std::error_code error;
  FT_CHECK(std::filesystem::is_regular_file(path, error), "TokenLoader: '", path, "' is not a regular file");
  const auto bytes = std::filesystem::file_size(path, error);
  FT_CHECK(!error, "TokenLoader: cannot stat '", path, "': ", error.message());
  return static_cast<int64_t>(bytes);
}

std::ifstream open_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in, "TokenLoader: cannot open '", path, "'");
  return in;
}

// Reads and checks a shard's header against the file's size.
ShardLayout shard_file_layout(const std::string& path) {
  const int64_t bytes = file_bytes(path);
  uint8_t header[kShardHeaderBytes] = {};
  if (bytes >= kShardHeaderBytes) {  // a shorter file fails shard_token_count's first check
    std::ifstream in = open_file(path);
    in.read(reinterpret_cast<char*>(header), kShardHeaderBytes);
    FT_CHECK(in, "TokenLoader: cannot read the header of '", path, "'");
  }
  return shard_layout(header, bytes, path);
}

// The tokens of a file of `format`: its header's count, or one a byte.
int64_t token_count(const std::string& path, TokenFormat format) {
  return format == TokenFormat::Shards ? shard_file_layout(path).tokens : file_bytes(path);
}

// The whole file's tokens; every id checked against the vocabulary, so a bad file fails here
// and never as an out-of-range embedding row deep inside a step.
std::vector<uint32_t> read_tokens(const std::string& path, TokenFormat format, int64_t length, int64_t vocab_size) {
  // The sizes were checked at construction; checking again catches a file replaced since then.
  const int64_t now = token_count(path, format);
  FT_CHECK(now == length, "TokenLoader: '", path, "' changed since the loader opened it (", length, " tokens, now ",
           now, ")");
  const int token_bytes = format == TokenFormat::Shards ? shard_file_layout(path).token_bytes : 1;
  std::ifstream in = open_file(path);
  if (format == TokenFormat::Shards) in.seekg(kShardHeaderBytes);
  std::vector<uint8_t> bytes(static_cast<size_t>(length * token_bytes));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  FT_CHECK(in, "TokenLoader: cannot read the tokens of '", path, "'");
  // Little-endian, as llm.c writes them, whatever the host's order.
  std::vector<uint32_t> tokens(static_cast<size_t>(length));
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t t = 0;
    for (int b = token_bytes - 1; b >= 0; --b) t = (t << 8) | bytes[i * static_cast<size_t>(token_bytes) + static_cast<size_t>(b)];
    tokens[i] = t;
  }
  check_token_ids(tokens, vocab_size, path);
  return tokens;
}

}  // namespace

TokenLoader::TokenLoader(const std::string& pattern, const Options& options) : options_(options) {
  FT_CHECK(options.batch_size > 0 && options.seq_len > 0,
           "TokenLoader: batch size and sequence length must be positive, got B=", options.batch_size,
           " T=", options.seq_len);
  FT_CHECK(options.vocab_size > 0, "TokenLoader: vocabulary size must be positive, got ", options.vocab_size);
  FT_CHECK(options.shard.world >= 1 && options.shard.rank >= 0 && options.shard.rank < options.shard.world,
           "TokenLoader: rank ", options.shard.rank, " of a data-parallel world of ", options.shard.world);
  int64_t step = 0;  // B·T·ranks, checked here once so that tokens_per_step() cannot overflow
  FT_CHECK(!__builtin_mul_overflow(options.batch_size, options.seq_len, &step) &&
               !__builtin_mul_overflow(step, options.shard.world, &step) && step < INT64_MAX,
           "TokenLoader: B*T*ranks = ", options.batch_size, "*", options.seq_len, "*", options.shard.world,
           " tokens a step is out of range");
  files_ = glob_files(pattern, FileOrder::Bytewise, "TokenLoader");
  for (const std::string& path : files_) {
    const int64_t length = token_count(path, options.format);
    FT_CHECK(length >= tokens_per_step() + 1, "TokenLoader: '", path, "' has ", length,
             " tokens, fewer than one batch needs (B*T*ranks+1 = ", tokens_per_step() + 1, " for B=",
             options.batch_size, " T=", options.seq_len, " on ", options.shard.world, " ranks)");
    lengths_.push_back(length);
  }
  set_position({});
}

const std::string& TokenLoader::current_file() const {
  return files_[static_cast<size_t>(order_[static_cast<size_t>(position_.shard)])];
}

int64_t TokenLoader::batches_per_epoch() const {
  int64_t batches = 0;
  for (int64_t length : lengths_) batches += (length - 1) / tokens_per_step();
  return batches;
}

void TokenLoader::set_position(const TokenPosition& position) {
  const int64_t files = static_cast<int64_t>(files_.size());
  FT_CHECK(position.epoch >= 0 && position.shard >= 0 && position.shard < files && position.offset >= 0,
           "TokenLoader: position (epoch ", position.epoch, ", shard ", position.shard, ", offset ", position.offset,
           ") is outside ", files, " files");
  // Checked before anything changes, so a rejected position leaves the loader as it was.
  std::vector<int64_t> order =
      order_.empty() || position.epoch != position_.epoch ? epoch_order(position.epoch) : order_;
  const size_t file = static_cast<size_t>(order[static_cast<size_t>(position.shard)]);
  // Compared as offset <= length - (B·T + 1): a saved offset near 2^63 would overflow the sum.
  // Every file holds at least B·T + 1 tokens, so the difference cannot go negative.
  FT_CHECK(position.offset <= lengths_[file] - tokens_per_step() - 1, "TokenLoader: position (epoch ", position.epoch,
           ", shard ", position.shard, ", offset ", position.offset, ") leaves fewer than B*T+1 = ",
           tokens_per_step() + 1, " tokens in '", files_[file], "' (", lengths_[file], " tokens)");
  order_ = std::move(order);
  position_ = position;
}

std::vector<int64_t> TokenLoader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(files_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (!options_.shuffle) return order;
  // Fisher-Yates written out rather than std::shuffle, whose algorithm the standard leaves to
  // each library: a saved position must name the same file under libstdc++ and libc++. The
  // modulo bias is at most files/2^64.
  std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  return order;
}

void TokenLoader::load_file(int64_t file) {
  if (file == loaded_file_) return;
  // Free the old file first: two GPT-2 shards at once would double the loader's memory.
  tokens_.clear();
  tokens_.shrink_to_fit();
  loaded_file_ = -1;
  tokens_ = read_tokens(files_[static_cast<size_t>(file)], options_.format, lengths_[static_cast<size_t>(file)],
                        options_.vocab_size);
  loaded_file_ = file;
}

TokenBatch TokenLoader::next_batch() {
  // Files are read here rather than when the position moves, so a bad file fails the call that
  // needs it and leaves the position where it was.
  load_file(order_[static_cast<size_t>(position_.shard)]);
  const int64_t B = options_.batch_size, T = options_.seq_len, step = tokens_per_step();
  TokenBatch batch{Tensor::empty({B, T}, DType::I32), Tensor::empty({B, T}, DType::I32)};
  // This rank's part of the global batch.
  const uint32_t* src = tokens_.data() + position_.offset + options_.shard.rank * B * T;
  int32_t* inputs = batch.inputs.data<int32_t>();
  int32_t* targets = batch.targets.data<int32_t>();
  for (int64_t i = 0; i < B * T; ++i) {
    inputs[i] = static_cast<int32_t>(src[i]);
    targets[i] = static_cast<int32_t>(src[i + 1]);
  }
  TokenPosition next = position_;
  next.offset += step;
  if (next.offset + step + 1 > lengths_[static_cast<size_t>(order_[static_cast<size_t>(next.shard)])]) {
    next.offset = 0;
    if (++next.shard == static_cast<int64_t>(files_.size())) {
      next.shard = 0;
      ++next.epoch;
    }
  }
  set_position(next);
  return batch;
}

void write_token_shard(const std::string& path, std::span<const uint32_t> tokens, int64_t vocab_size) {
  const std::vector<uint8_t> bytes = shard_file_bytes(tokens, vocab_size);
  AtomicFile file(path, "write_token_shard");
  file.write(bytes.data(), bytes.size());
  file.commit();
}

Batch TokenBatchSource::next() {
  TokenBatch b = loader_.next_batch();
  return {{"inputs", std::move(b.inputs)}, {"targets", std::move(b.targets)}};
}

DataPosition TokenBatchSource::position() const {
  const TokenPosition p = loader_.position();
  return {{"epoch", std::to_string(p.epoch)}, {"shard", std::to_string(p.shard)}, {"offset", std::to_string(p.offset)}};
}

void TokenBatchSource::set_position(const DataPosition& position) {
  auto field = [&](const char* name) {
    const auto it = position.find(name);
    FT_CHECK(it != position.end(), "TokenBatchSource: the saved position has no '", name, "'");
    return parse_int64(it->second, std::string("TokenBatchSource: the saved position's '") + name + "'");
  };
  loader_.set_position(TokenPosition{field("epoch"), field("shard"), field("offset")});
}

}  // namespace ft
