// Text files to llm.c token shards through a BPE tokenizer, on every core: each file is one
// document, opened by a document-start token (<|endoftext|> for GPT-2, as llm.c's scripts write
// theirs; <|begin_of_text|> for Llama 3). The stream's first val_tokens go to
// `<name>_val_000000.bin` and the rest to `<name>_train_000001.bin`, ... of shard_tokens each
// (the last one shorter), the names llm.c's data scripts give.
//
// Files are read 64 MB at a time and cut into pieces of about 1 MB that threads encode apart.
// A cut falls only where the tokenizer says pieces always break (BpeTokenizer::
// splits_at_line_starts: before a letter that starts a line after a line that ends in a visible
// ASCII character, for GPT-2's and Llama 3's patterns), so the tokens equal those of each file
// encoded whole; for another tokenizer each file is encoded whole, the files on several threads
// at once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/data/bpe_tokenizer.h"

namespace ft {

struct TextShardOptions {
  std::string folder;              ///< created if missing
  std::string name = "text";       ///< the shards' name prefix
  int64_t shard_tokens = 100000000;  ///< tokens a training shard holds (llm.c's fineweb: 100M)
  int64_t val_tokens = 0;          ///< the first tokens, written to the val shard (0: none)
  int threads = 0;                 ///< 0: every core
  int32_t document_start = -1;     ///< the token opening each file; -1: none
  /// Text encoded as one piece of work (tests make it small, to exercise the cuts).
  int64_t piece_bytes = int64_t{1} << 20;
};

struct TextShardSummary {
  int64_t documents = 0, text_bytes = 0, tokens = 0;
  std::vector<std::string> shards;  ///< the files written, val first
};

/// Encodes `files` in order and writes their shards (write_token_shard: atomic, GPT-2's form for
/// a vocabulary up to 65,536, else Llama 3's). A file that cannot be read, a folder that cannot
/// be made, a shard_tokens below 1 or a negative val_tokens is an ft::Error naming it.
TextShardSummary write_text_shards(const BpeTokenizer& tokenizer, const std::vector<std::string>& files,
                                   const TextShardOptions& options);

/// The glob pattern of `files` written as shards (write_text_shards, named `name`, one document a
/// file opened by the tokenizer's document_start_token) into a folder under `cache_root` named by
/// a hash of the tokenizer file's bytes and each file's path, size and modification time. The
/// folder is written once (under a temporary name, then renamed) and reused while none of those
/// change, so a run and its --resume read the same tokens.
std::string cached_text_shards(const BpeTokenizer& tokenizer, const std::string& tokenizer_path,
                               const std::vector<std::string>& files, const std::string& cache_root,
                               const std::string& name);

/// The cuts write_text_shards makes in `text` for pieces of about `piece_bytes`: byte offsets,
/// ascending, each just before an ASCII letter that follows a newline that follows a visible ASCII
/// character (empty when none is allowed). Exposed for its test.
std::vector<size_t> line_start_cuts(const std::string& text, int64_t piece_bytes);

}  // namespace ft
