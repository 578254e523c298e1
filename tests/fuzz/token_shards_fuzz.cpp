// Fuzz target: llm.c token shards and text read as tokens (train/data/token_shard_format.h). The input
// is a whole shard file: an accepted header's count matches the file's size exactly, and the
// token check refuses a shard exactly when one of its ids is outside the vocabulary. The same
// bytes as a text file (one token a byte) are checked against a vocabulary of 128.
#include <algorithm>
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "train/data/token_shard_format.h"

namespace {

using ft::fuzz::accepts;
using ft::fuzz::require;

constexpr int64_t kGpt2Vocab = 50257;
constexpr int64_t kAsciiVocab = 128;

void check_ids(const std::vector<uint16_t>& tokens, int64_t vocab_size) {
  const bool accepted = accepts([&] { ft::check_token_ids(tokens, vocab_size, "fuzz.bin"); });
  const bool all_below = std::all_of(tokens.begin(), tokens.end(), [&](uint16_t t) { return t < vocab_size; });
  require(accepted == all_below, "token ids are refused exactly when one is outside the vocabulary");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The loader reads the header only from a file long enough to hold it; a shorter one is padded.
  uint8_t header[ft::kShardHeaderBytes] = {};
  std::memcpy(header, data, std::min<size_t>(size, sizeof header));
  int64_t count = -1;
  if (accepts([&] { count = ft::shard_token_count(header, static_cast<int64_t>(size), "fuzz.bin"); })) {
    require(count >= 0 && ft::kShardHeaderBytes + 2 * count == static_cast<int64_t>(size),
            "the header's count matches the file's size");
    std::vector<uint16_t> tokens(static_cast<size_t>(count));
    for (size_t i = 0; i < tokens.size(); ++i) {
      const uint8_t* p = data + ft::kShardHeaderBytes + 2 * i;
      tokens[i] = static_cast<uint16_t>(p[0] | (p[1] << 8));  // little-endian, as llm.c writes them
    }
    check_ids(tokens, kGpt2Vocab);
  }
  check_ids(std::vector<uint16_t>(data, data + size), kAsciiVocab);
  return 0;
}
