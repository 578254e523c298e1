#include "train/io/checkpoint_records.h"

#include <charconv>

#include "lib/error.h"
#include "lib/parse.h"
#include "train/io/json.h"

namespace ft {

std::string format_checkpoint_manifest(const std::map<std::string, ManifestEntry>& files) {
  std::string text = "{";
  for (const auto& [name, entry] : files)
    text += std::string(text.size() > 1 ? ", " : "") + json_quote(name) + ": {\"bytes\": " +
            std::to_string(entry.bytes) + ", \"crc32\": " + std::to_string(entry.crc32) + "}";
  return text + "}\n";
}

std::map<std::string, ManifestEntry> parse_checkpoint_manifest(const std::string& text,
                                                               const std::vector<std::string>& names,
                                                               const std::string& path) {
  const JsonValue manifest = parse_json(text, "load_checkpoint: '" + path + "'", JsonScalars::IntegersOnly);
  std::map<std::string, ManifestEntry> out;
  for (const std::string& name : names) {
    const JsonValue* entry = manifest.find(name);
    const JsonValue* bytes = entry ? entry->find("bytes") : nullptr;
    const JsonValue* crc = entry ? entry->find("crc32") : nullptr;
    FT_CHECK(bytes && crc && bytes->kind == JsonValue::Kind::Integer && crc->kind == JsonValue::Kind::Integer,
             "load_checkpoint: '", path, "' has no size and crc32 for ", name);
    // A CRC-32 outside 32 bits would be cut to 32 and could then match a file it does not describe.
    FT_CHECK(crc->integer >= 0 && crc->integer <= int64_t{UINT32_MAX}, "load_checkpoint: '", path, "' has crc32 ",
             crc->integer, " for ", name, ", which is not a 32-bit checksum");
    out[name] = ManifestEntry{.bytes = bytes->integer, .crc32 = static_cast<uint32_t>(crc->integer)};
  }
  return out;
}

std::vector<std::string> checkpoint_manifest_names(const std::string& text, const std::string& path) {
  const JsonValue manifest = parse_json(text, "load_checkpoint: '" + path + "'", JsonScalars::IntegersOnly);
  std::vector<std::string> names;
  for (const auto& [name, entry] : manifest.members) names.push_back(name);
  return names;
}

CheckpointCounters parse_checkpoint_counters(const std::map<std::string, std::string>& metadata,
                                             const std::string& folder) {
  CheckpointCounters out;
  const auto step = metadata.find("step");
  FT_CHECK(step != metadata.end(), "load_checkpoint: '", folder, "' has no step in its metadata");
  out.step = parse_int64(step->second, "load_checkpoint: '" + folder + "': the metadata's step");
  FT_CHECK(out.step >= 0, "load_checkpoint: '", folder, "': negative step ", out.step, " in its metadata");
  if (const auto philox = metadata.find("philox"); philox != metadata.end()) {
    uint64_t value = 0;
    const std::string& text = philox->second;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    FT_CHECK(error == std::errc() && end == text.data() + text.size(), "load_checkpoint: '", folder,
             "' has a bad philox counter '", text, "' in its metadata");
    out.philox = value;
  }
  return out;
}

}  // namespace ft
