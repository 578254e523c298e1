// Token streams for language models: llm.c token shards or plain text read as bytes, cut into
// [B, T] batches of inputs and next-token targets.
//
// B: batch size, T: sequence length, V: vocabulary size.
//
// An llm.c shard is a header of 256 little-endian int32 (header[0] = 20240520, the magic;
// header[1] = 1, the version; header[2] = the number of tokens N) followed by N little-endian
// uint16 tokens; llm.c's Llama 3 shards (magic 20240801, version 7) hold uint32 tokens, for
// vocabularies past 65,536 (train/data/token_shard_format.h). A text file is a stream of bytes,
// each one a token (V = 256).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lib/tensor.h"
#include "train/data/batch_source.h"
#include "train/data/batches.h"

namespace ft {

/// How the files matched by a TokenLoader's pattern are read. The format is stated, never
/// sniffed from the first bytes: sniffing would read a shard with a corrupt magic as text and
/// train on garbage instead of failing.
enum class TokenFormat {
  Shards,  ///< llm.c token shards (uint16 tokens, or uint32 in the Llama 3 form)
  Text,    ///< raw bytes; every byte is one token
};

/// Where the next batch starts. `shard` indexes this epoch's shard order (the sorted file list
/// when shuffle is off), not the file list itself; `offset` counts tokens into that shard.
struct TokenPosition {
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t offset = 0;
  bool operator==(const TokenPosition&) const = default;
};

/// One batch of the B·T + 1 tokens x[0..B·T] from the batch's position: inputs[b, t] =
/// x[b·T + t] and targets[b, t] = x[b·T + t + 1], both i32 [B, T] on the CPU.
struct TokenBatch {
  Tensor inputs;
  Tensor targets;
};

/// Reads the files matching a glob pattern, in sorted order, as one token stream per file, and
/// yields batches of B·T + 1 consecutive tokens. Consecutive batches overlap by one token (the
/// last target of one batch is the first input of the next), as in llm.c. When a file has fewer
/// than B·T + 1 tokens left, its tail is skipped and the next file starts; after the last file
/// a new epoch starts from the first. With shuffle on, every epoch (the first included) visits
/// the files in an order drawn from (seed, epoch), so a position alone is enough to resume.
///
/// Headers, file sizes and lengths are checked for every file at construction. Token ids are
/// checked against V when a file is read: whole, into memory (about 400 MB for a GPT-2 shard of 100M tokens, held as uint32),
/// by the first next_batch() that needs it. Only the current file is held.
class TokenLoader {
 public:
  struct Options {
    int64_t batch_size = 0;  ///< B
    int64_t seq_len = 0;     ///< T
    int64_t vocab_size = 0;  ///< V: every token must be < V
    uint64_t seed = 0;
    bool shuffle = false;
    TokenFormat format = TokenFormat::Shards;
    /// Data parallelism (llm.c's layout): the position steps through global batches of
    /// world · B·T tokens, and rank r's batch is the r-th B·T of each, so that the ranks read
    /// disjoint tokens and a position means the same data on any world size with the same
    /// global batch. The file checks and batches_per_epoch count global batches.
    BatchShard shard = {};
  };

  /// Globs `pattern` (glob(3), matches sorted bytewise); a plain path matches itself. No match,
  /// a file that is not a valid shard (bad magic, bad version, negative count, size other than
  /// 1024 + 2·N bytes) or a file with fewer than B·T + 1 tokens is an ft::Error naming the file
  /// (or the pattern) and what was wrong. Reads no tokens yet.
  TokenLoader(const std::string& pattern, const Options& options);

  /// The batch at position(), then advances the position by B·T tokens (to the next file or
  /// epoch when the current one has too few left). When the batch's file is not in memory yet it
  /// is read first; a token >= V in it is an ft::Error naming the file, the token's index in the
  /// file and its id, and leaves the position unchanged.
  TokenBatch next_batch();

  /// Where the next batch starts. Always a valid batch start: offset + B·T + 1 <= file length.
  TokenPosition position() const { return position_; }
  /// Moves to `position` (as returned by position(), possibly by another loader with the same
  /// pattern and options), so that the next batches are exactly those that followed it there.
  /// A position that cannot be a batch start is an ft::Error and changes nothing. The offset need
  /// not be a multiple of B·T, so a run may resume with another batch shape.
  void set_position(const TokenPosition& position);
  /// Back to the start of epoch 0.
  void reset() { set_position({}); }

  /// The matched files, sorted.
  const std::vector<std::string>& files() const { return files_; }
  /// The file the next batch comes from.
  const std::string& current_file() const;
  /// Batches in one epoch: the sum over files of floor((N - 1) / (B·T)).
  int64_t batches_per_epoch() const;

 private:
  /// File indices in the order epoch `epoch` visits them.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  void load_file(int64_t file);
  /// Tokens one (global) batch advances the position by: world · B·T.
  int64_t tokens_per_step() const { return options_.batch_size * options_.seq_len * options_.shard.world; }

  Options options_;
  std::vector<std::string> files_;
  std::vector<int64_t> lengths_;  // tokens per file, known from the headers before any file is read
  std::vector<int64_t> order_;    // this epoch's file order
  TokenPosition position_;
  int64_t loaded_file_ = -1;  // the file whose tokens are in tokens_
  std::vector<uint32_t> tokens_;
};

/// Writes `tokens` (each below V) to `path` as an llm.c shard (GPT-2's form when V <= 65,536,
/// else Llama 3's), atomically: a crash leaves the old file or the new one.
void write_token_shard(const std::string& path, std::span<const uint32_t> tokens, int64_t vocab_size);

/// A TokenLoader as a batch source: batches of "inputs" and "targets" (i32 [B, T]), at the
/// loader's position ("epoch", "shard" and "offset", as checkpoints store it).
class TokenBatchSource : public BatchSource {
 public:
  /// Reads from `loader`, which must outlive this source.
  explicit TokenBatchSource(TokenLoader& loader) : loader_(loader) {}
  Batch next() override;
  DataPosition position() const override;
  void set_position(const DataPosition& position) override;

 private:
  TokenLoader& loader_;
};

}  // namespace ft
