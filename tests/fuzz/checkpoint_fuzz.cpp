// Fuzz target: what load_checkpoint parses besides tensors (train/io/checkpoint_records.h and the
// optimizer file's safetensors header). The input is the manifest's text, a NUL byte, then the
// bytes of optimizer.safetensors, whose metadata holds the step and the Philox counter. An
// accepted manifest writes back (format_checkpoint_manifest) to text that reads the same.
#include <algorithm>
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "train/io/checkpoint_records.h"
#include "train/io/safetensors_header.h"

namespace {

using ft::fuzz::accepts;
using ft::fuzz::require;

const std::vector<std::string> kFiles = {"model.safetensors", "optimizer.safetensors"};

bool same(const std::map<std::string, ft::ManifestEntry>& a, const std::map<std::string, ft::ManifestEntry>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.first == y.first && x.second.bytes == y.second.bytes && x.second.crc32 == y.second.crc32;
  });
}

void fuzz_manifest(const std::string& text) {
  std::map<std::string, ft::ManifestEntry> manifest;
  if (!accepts([&] { manifest = ft::parse_checkpoint_manifest(text, kFiles, "fuzz/manifest.json"); })) return;
  require(manifest.size() == kFiles.size(), "an accepted manifest has every file");
  const std::string written = ft::format_checkpoint_manifest(manifest);
  require(same(ft::parse_checkpoint_manifest(written, kFiles, "fuzz/written.json"), manifest),
          "a manifest reads back as written");
}

void fuzz_optimizer_metadata(const uint8_t* data, size_t size) {
  uint8_t length[8] = {};
  std::memcpy(length, data, std::min<size_t>(size, 8));
  ft::SafetensorsHeader header;
  const bool read = accepts([&] {
    const uint64_t header_size = ft::safetensors_header_length(length, size, "fuzz/optimizer.safetensors");
    const std::string json(reinterpret_cast<const char*>(data) + 8, header_size);
    header = ft::parse_safetensors_header(json, size - 8 - header_size, "fuzz/optimizer.safetensors");
  });
  if (!read) return;
  ft::CheckpointCounters counters;
  if (accepts([&] { counters = ft::parse_checkpoint_counters(header.metadata, "fuzz"); }))
    require(counters.step >= 0, "a checkpoint's step is not negative");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t manifest_size = nul ? static_cast<size_t>(nul - data) : size;
  fuzz_manifest(ft::fuzz::as_text(data, manifest_size));
  if (nul) fuzz_optimizer_metadata(nul + 1, size - manifest_size - 1);
  return 0;
}
