#include "train/data/token_shard_format.h"

#include <algorithm>

#include "lib/error.h"

namespace ft {

namespace {

int32_t little_endian_i32(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24));
}

}  // namespace

int64_t shard_token_count(std::span<const uint8_t, kShardHeaderBytes> header, int64_t file_bytes,
                          const std::string& path) {
  FT_CHECK(file_bytes >= kShardHeaderBytes, "TokenLoader: '", path, "' is truncated: ", file_bytes,
           " bytes, shorter than the ", kShardHeaderBytes, "-byte shard header");
  const int32_t magic = little_endian_i32(header.data()), version = little_endian_i32(header.data() + 4);
  const int64_t count = little_endian_i32(header.data() + 8);
  FT_CHECK(magic == kShardMagic, "TokenLoader: '", path, "' has magic ", magic, ", expected ", kShardMagic,
           " (not an llm.c token shard; a text file is read as bytes: ft-gpt2 --format text)");
  FT_CHECK(version == kShardVersion, "TokenLoader: '", path, "' has version ", version, ", expected ", kShardVersion,
           " (uint16 tokens)");
  FT_CHECK(count >= 0, "TokenLoader: '", path, "' has a negative token count ", count);
  const int64_t expected = kShardHeaderBytes + 2 * count;
  FT_CHECK(file_bytes == expected, "TokenLoader: '", path, "' is ", file_bytes, " bytes but its header promises ",
           count, " tokens (", expected, " bytes)", file_bytes < expected ? " (truncated)" : " (trailing data)");
  return count;
}

void check_token_ids(std::span<const uint16_t> tokens, int64_t vocab_size, const std::string& path) {
  const auto bad = std::find_if(tokens.begin(), tokens.end(), [&](uint16_t t) { return t >= vocab_size; });
  FT_CHECK(bad == tokens.end(), "TokenLoader: '", path, "' has token id ", *bad, " at position ",
           bad - tokens.begin(), ", not below ", vocab_size, " (the tokenizer's vocabulary, ft-gpt2's --tokens)");
}

}  // namespace ft
