// The bytes of llm.c token shards, without the loader: the 256 × int32 header's checks and the
// token ids' check against the vocabulary. train/data/token_shards.h reads files through it; kept
// apart so that the format's parser runs on bytes alone (its fuzz target links no tensor library).
//
// V: vocabulary size.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace ft {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;

/// The token count N of a shard of `file_bytes` bytes whose first kShardHeaderBytes bytes are
/// `header` (any content when the file is shorter). A file shorter than the header, a bad magic,
/// a bad version, a negative count or a size other than 1024 + 2·N bytes is an ft::Error naming
/// `path`.
int64_t shard_token_count(std::span<const uint8_t, kShardHeaderBytes> header, int64_t file_bytes,
                          const std::string& path);

/// Checks that every token id of the file `path` is below V; the first one that is not is an
/// ft::Error naming the file, its index and its id.
void check_token_ids(std::span<const uint16_t> tokens, int64_t vocab_size, const std::string& path);

}  // namespace ft
