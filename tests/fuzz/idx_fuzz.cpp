// Fuzz target: IDX files (train/data/idx.h): parse_idx on the bytes and, for a gzip stream, read_idx
// on the bytes written to a file. An accepted array's payload is exactly the product of its dims.
#include "tests/fuzz/fuzz_check.h"
#include "train/data/idx.h"

namespace {

using ft::fuzz::require;

void check(const ft::IdxArray& a) {
  require(!a.dims.empty() && a.dims.size() <= 4, "1 to 4 dims");
  unsigned __int128 count = 1;  // four 32-bit dims cannot overflow 128 bits
  for (int64_t d : a.dims) {
    require(d >= 0 && d <= int64_t{UINT32_MAX}, "a dim is a 32-bit count");
    count *= static_cast<uint64_t>(d);
  }
  require(count == a.data.size(), "the payload is the product of the dims");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ft::IdxArray parsed;
  if (ft::fuzz::accepts([&] { parsed = ft::parse_idx(std::vector<uint8_t>(data, data + size), "fuzz.idx"); }))
    check(parsed);
  // Only gzip streams go through the file: read_idx hands a plain file's bytes to parse_idx as
  // they are, and a file and zlib for every input would cost most of the run's time.
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!gzip) return 0;
  static ft::fuzz::ScratchFile file;
  ft::IdxArray read;
  if (ft::fuzz::accepts([&] { read = ft::read_idx(file.write(data, size)); })) check(read);
  return 0;
}
