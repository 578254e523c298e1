// The text a checkpoint folder holds beside its tensors: the manifest (each file's size and
// CRC-32, written last) and the counters in the optimizer file's metadata (the step and the
// dropout masks' Philox counter). Kept apart from train/io/checkpoint.h, which moves tensors, so
// that what load_checkpoint parses runs on bytes alone (its fuzz target links no tensor library).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ft {

/// A file's entry in the manifest.
struct ManifestEntry {
  int64_t bytes = 0;
  uint32_t crc32 = 0;
};

/// The manifest's JSON text for `files` (by file name).
std::string format_checkpoint_manifest(const std::map<std::string, ManifestEntry>& files);

/// Reads the entries of `names` from the manifest text of the file `path`. Text that is not
/// JSON, or a name without an integer size and a CRC-32 in [0, 2^32), is an ft::Error naming
/// `path`.
std::map<std::string, ManifestEntry> parse_checkpoint_manifest(const std::string& text,
                                                               const std::vector<std::string>& names,
                                                               const std::string& path);

/// Every file name the manifest text of the file `path` lists. Text that is not JSON is an
/// ft::Error naming `path`.
std::vector<std::string> checkpoint_manifest_names(const std::string& text, const std::string& path);

/// The counters a checkpoint restores, read from the optimizer file's metadata.
struct CheckpointCounters {
  int64_t step = 0;
  std::optional<uint64_t> philox;  // absent in older checkpoints
};

/// Reads "step" (required, a non-negative int64) and "philox" (optional, a uint64) from the
/// metadata of the checkpoint in `folder`; anything else is left to the caller. A missing or bad
/// value is an ft::Error naming `folder`.
CheckpointCounters parse_checkpoint_counters(const std::map<std::string, std::string>& metadata,
                                             const std::string& folder);

}  // namespace ft
