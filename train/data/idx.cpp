#include "train/data/idx.h"

#include <zlib.h>

#include <memory>

#include "lib/error.h"

namespace ft {

namespace {

// gzread also reads plain files transparently, so one path serves both.
std::vector<uint8_t> read_all(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  FT_CHECK(file != nullptr, "read_idx: cannot open '", path, "'");
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(file, gzclose);
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      FT_FAIL("read_idx: '", path, "' is corrupt: ", message);
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  // A gzip stream cut short reads as a clean end on some zlib versions; gzerror tells.
  int code = 0;
  const char* message = gzerror(file, &code);
  FT_CHECK(code == Z_OK || code == Z_STREAM_END, "read_idx: '", path, "' is corrupt or truncated: ", message);
  return bytes;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

IdxArray parse_idx(const std::vector<uint8_t>& bytes, const std::string& path) {
  FT_CHECK(bytes.size() >= 4, "read_idx: '", path, "' is too short for an IDX header (", bytes.size(), " bytes)");
  FT_CHECK(bytes[0] == 0 && bytes[1] == 0, "read_idx: '", path, "' has a bad magic number (first bytes ",
           int{bytes[0]}, " ", int{bytes[1]}, ", expected 0 0)");
  FT_CHECK(bytes[2] == 0x08, "read_idx: '", path, "' has element type 0x", std::hex, int{bytes[2]},
           ", only unsigned bytes (0x08) are supported");
  const int ndim = bytes[3];
  FT_CHECK(ndim >= 1 && ndim <= 4, "read_idx: '", path, "' declares ", ndim, " dims");
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  FT_CHECK(bytes.size() >= header, "read_idx: '", path, "' is truncated inside its header");
  IdxArray out;
  // Four dims below 2^32 multiply to less than 2^128, so this count cannot wrap around to a
  // product that matches the payload while the dims promise far more.
  const size_t payload = bytes.size() - header;
  unsigned __int128 count = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t size = big_endian_u32(bytes.data() + 4 + 4 * d);
    out.dims.push_back(size);
    count *= size;
  }
  FT_CHECK(count == payload, "read_idx: '", path, "' holds ", payload, " payload bytes but its header promises ",
           count <= UINT64_MAX ? std::to_string(static_cast<uint64_t>(count)) : std::string("more than 2^64"),
           (payload < count ? " (truncated)" : " (trailing data)"));
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

IdxArray read_idx(const std::string& path) { return parse_idx(read_all(path), path); }

}  // namespace ft
