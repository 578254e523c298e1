// Fuzz target: llm.c token shards and text read as tokens (train/data/token_shard_format.h). The input
// is a whole shard file: an accepted header's count and token width match the file's size
// exactly, the token check refuses a shard exactly when one of its ids is outside the
// vocabulary, and the shard written again from its tokens is the same bytes. The same bytes as a
// text file (one token a byte) are checked against a vocabulary of 128.
#include <algorithm>
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "train/data/token_shard_format.h"

namespace {

using ft::fuzz::accepts;
using ft::fuzz::require;

constexpr int64_t kGpt2Vocab = 50257;
constexpr int64_t kAsciiVocab = 128;

bool check_ids(const std::vector<uint32_t>& tokens, int64_t vocab_size) {
  const bool accepted = accepts([&] { ft::check_token_ids(tokens, vocab_size, "fuzz.bin"); });
  const bool all_below = std::all_of(tokens.begin(), tokens.end(), [&](uint32_t t) { return t < vocab_size; });
  require(accepted == all_below, "token ids are refused exactly when one is outside the vocabulary");
  return accepted;
}

constexpr int64_t kLlama3Vocab = 128256;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The loader reads the header only from a file long enough to hold it; a shorter one is padded.
  uint8_t header[ft::kShardHeaderBytes] = {};
  std::memcpy(header, data, std::min<size_t>(size, sizeof header));
  ft::ShardLayout layout;
  if (accepts([&] { layout = ft::shard_layout(header, static_cast<int64_t>(size), "fuzz.bin"); })) {
    require(layout.tokens >= 0 && (layout.token_bytes == 2 || layout.token_bytes == 4) &&
                ft::kShardHeaderBytes + layout.token_bytes * layout.tokens == static_cast<int64_t>(size),
            "the header's count and width match the file's size");
    std::vector<uint32_t> tokens(static_cast<size_t>(layout.tokens));
    for (size_t i = 0; i < tokens.size(); ++i) {
      const uint8_t* p = data + ft::kShardHeaderBytes + static_cast<size_t>(layout.token_bytes) * i;
      for (int b = layout.token_bytes - 1; b >= 0; --b) tokens[i] = (tokens[i] << 8) | p[b];  // little-endian
    }
    const int64_t vocab = layout.token_bytes == 2 ? kGpt2Vocab : kLlama3Vocab;
    if (check_ids(tokens, vocab)) {
      // Written again: the header's other 253 ints are zeros in a shard we write.
      const std::vector<uint8_t> again = ft::shard_file_bytes(tokens, vocab);
      const bool zero_rest = std::all_of(data + 12, data + ft::kShardHeaderBytes, [](uint8_t b) { return b == 0; });
      if (zero_rest) require(std::equal(again.begin(), again.end(), data, data + size), "a shard writes back unchanged");
    }
  }
  check_ids(std::vector<uint32_t>(data, data + size), kAsciiVocab);
  return 0;
}
