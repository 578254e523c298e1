// Fuzz target: safetensors headers (train/io/safetensors_header.h). The input is a whole file: the
// 8-byte length, the JSON header and the data. An accepted header names only ranges that lie in
// the data, that do not overlap and whose size is exactly dtype size × the shape's elements; the
// target then copies every tensor's bytes as load_safetensors does, so a range that overran the
// data would be an ASan report.
#include <algorithm>
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "train/io/safetensors_header.h"

namespace {

using ft::fuzz::require;

void check(const ft::SafetensorsHeader& header, const uint8_t* data, uint64_t data_size) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const ft::SafetensorsEntry& t : header.tensors) {
    require(t.begin <= t.end && t.end <= data_size, "a tensor's range lies in the data");
    // Saturated past 2^64 so that 128 bits never overflow, yet a later zero dim still gives 0.
    constexpr unsigned __int128 kTooLarge = (static_cast<unsigned __int128>(1) << 64) + 1;
    unsigned __int128 bytes = ft::dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      require(d >= 0 && d < (int64_t{1} << 40), "a dimension is in range");
      bytes = std::min(bytes * static_cast<uint64_t>(d), kTooLarge);
    }
    require(bytes == t.end - t.begin, "a range holds exactly its shape's bytes");
    const std::vector<uint8_t> copy(data + t.begin, data + t.end);
    ranges.emplace_back(t.begin, t.end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) require(ranges[i].first >= ranges[i - 1].second, "ranges do not overlap");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t length[8] = {};
  std::memcpy(length, data, std::min<size_t>(size, 8));
  uint64_t header_size = 0;
  if (!ft::fuzz::accepts([&] { header_size = ft::safetensors_header_length(length, size, "fuzz.safetensors"); }))
    return 0;
  require(8 + header_size <= size, "the header lies in the file");
  const std::string json(reinterpret_cast<const char*>(data) + 8, header_size);
  const uint64_t data_size = size - 8 - header_size;
  ft::SafetensorsHeader header;
  if (ft::fuzz::accepts([&] { header = ft::parse_safetensors_header(json, data_size, "fuzz.safetensors"); }))
    check(header, data + 8 + header_size, data_size);
  return 0;
}
