#include "train/data/token_shard_format.h"

#include <algorithm>
#include <climits>

#include "lib/error.h"

namespace ft {

namespace {

int32_t little_endian_i32(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24));
}

}  // namespace

ShardLayout shard_layout(std::span<const uint8_t, kShardHeaderBytes> header, int64_t file_bytes,
                         const std::string& path) {
  FT_CHECK(file_bytes >= kShardHeaderBytes, "TokenLoader: '", path, "' is truncated: ", file_bytes,
           " bytes, shorter than the ", kShardHeaderBytes, "-byte shard header");
  const int32_t magic = little_endian_i32(header.data()), version = little_endian_i32(header.data() + 4);
  const int64_t count = little_endian_i32(header.data() + 8);
  FT_CHECK(magic == kShardMagic || magic == kShard32Magic, "TokenLoader: '", path, "' has magic ", magic,
           ", expected ", kShardMagic, " (GPT-2's uint16 tokens) or ", kShard32Magic,
           " (Llama 3's uint32): not an llm.c token shard (a text file is read as bytes: ft-gpt2 --format text)");
  const bool wide = magic == kShard32Magic;
  const int32_t expected_version = wide ? kShard32Version : kShardVersion;
  FT_CHECK(version == expected_version, "TokenLoader: '", path, "' has version ", version, ", expected ",
           expected_version, " for magic ", magic, wide ? " (uint32 tokens)" : " (uint16 tokens)");
  FT_CHECK(count >= 0, "TokenLoader: '", path, "' has a negative token count ", count);
  const ShardLayout layout{count, wide ? 4 : 2};
  const int64_t expected = kShardHeaderBytes + layout.token_bytes * count;
  FT_CHECK(file_bytes == expected, "TokenLoader: '", path, "' is ", file_bytes, " bytes but its header promises ",
           count, " tokens (", expected, " bytes)", file_bytes < expected ? " (truncated)" : " (trailing data)");
  return layout;
}

void check_token_ids(std::span<const uint32_t> tokens, int64_t vocab_size, const std::string& path) {
  const auto bad = std::find_if(tokens.begin(), tokens.end(), [&](uint32_t t) { return t >= vocab_size; });
  FT_CHECK(bad == tokens.end(), "TokenLoader: '", path, "' has token id ", *bad, " at position ",
           bad - tokens.begin(), ", not below ", vocab_size, " (the tokenizer's vocabulary, ft-gpt2's --tokens)");
}

std::vector<uint8_t> shard_file_bytes(std::span<const uint32_t> tokens, int64_t vocab_size) {
  FT_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 32), "shard_file_bytes: vocabulary size ", vocab_size,
           " is outside [1, 2^32]");
  FT_CHECK(static_cast<int64_t>(tokens.size()) <= INT32_MAX, "shard_file_bytes: ", tokens.size(),
           " tokens do not fit one shard's int32 count");
  const auto bad = std::find_if(tokens.begin(), tokens.end(), [&](uint32_t t) { return t >= vocab_size; });
  FT_CHECK(bad == tokens.end(), "shard_file_bytes: token ", bad - tokens.begin(), " is ", *bad,
           ", not below the vocabulary size ", vocab_size);
  const bool wide = vocab_size > 65536;
  const int token_bytes = wide ? 4 : 2;
  std::vector<uint8_t> bytes(static_cast<size_t>(kShardHeaderBytes) + tokens.size() * static_cast<size_t>(token_bytes), 0);
  auto put = [&](size_t at, uint32_t value, int width) {
    for (int i = 0; i < width; ++i) bytes[at + static_cast<size_t>(i)] = static_cast<uint8_t>(value >> (8 * i));
  };
  put(0, static_cast<uint32_t>(wide ? kShard32Magic : kShardMagic), 4);
  put(4, static_cast<uint32_t>(wide ? kShard32Version : kShardVersion), 4);
  put(8, static_cast<uint32_t>(tokens.size()), 4);
  for (size_t i = 0; i < tokens.size(); ++i)
    put(static_cast<size_t>(kShardHeaderBytes) + i * static_cast<size_t>(token_bytes), tokens[i], token_bytes);
  return bytes;
}

}  // namespace ft
