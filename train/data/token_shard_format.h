// The bytes of llm.c token shards, without the loader: the 256 × int32 header's checks, the
// token ids' check against the vocabulary, and a shard's bytes for a writer. GPT-2's shards hold
// uint16 tokens (magic 20240520, version 1), llm.c's Llama 3 shards uint32 (20240801, version 7). train/data/token_shards.h reads files through it; kept
// apart so that the format's parser runs on bytes alone (its fuzz target links no tensor library).
//
// V: vocabulary size.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ft {

/// GPT-2's shards: uint16 tokens.
inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
/// llm.c's Llama 3 shards, for vocabularies past 65,536: uint32 tokens.
inline constexpr int32_t kShard32Magic = 20240801;
inline constexpr int32_t kShard32Version = 7;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;

/// What a shard's header says: N tokens of `token_bytes` (2 or 4) bytes each.
struct ShardLayout {
  int64_t tokens = 0;
  int token_bytes = 2;
};

/// The layout of a shard of `file_bytes` bytes whose first kShardHeaderBytes bytes are `header`
/// (any content when the file is shorter). A file shorter than the header, a magic other than
/// the two above, the wrong version for its magic, a negative count or a size other than
/// 1024 + token_bytes·N is an ft::Error naming `path`.
ShardLayout shard_layout(std::span<const uint8_t, kShardHeaderBytes> header, int64_t file_bytes,
                         const std::string& path);

/// Checks that every token id of the file `path` is below V; the first one that is not is an
/// ft::Error naming the file, its index and its id.
void check_token_ids(std::span<const uint32_t> tokens, int64_t vocab_size, const std::string& path);

/// A whole shard file holding `tokens` (each below V): GPT-2's form when V <= 65,536, else
/// Llama 3's, so that every shard of one tokenizer has one form. An id >= V, a V past 2^32 or more
/// than 2^31 - 1 tokens (the header's int32 count) is an ft::Error.
std::vector<uint8_t> shard_file_bytes(std::span<const uint32_t> tokens, int64_t vocab_size);

}  // namespace ft
