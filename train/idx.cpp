#include "train/idx.h"

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

IdxArray read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_all(path);
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
  size_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t size = big_endian_u32(bytes.data() + 4 + 4 * d);
    out.dims.push_back(size);
    count *= size;
  }
  FT_CHECK(bytes.size() - header == count, "read_idx: '", path, "' holds ", bytes.size() - header,
           " payload bytes but its header promises ", count, (bytes.size() - header < count ? " (truncated)" : " (trailing data)"));
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

ImageDataset load_fashion_mnist(const std::string& dir, const std::string& split) {
  const IdxArray images = read_idx(dir + "/" + split + "-images-idx3-ubyte.gz");
  const IdxArray labels = read_idx(dir + "/" + split + "-labels-idx1-ubyte.gz");
  FT_CHECK(images.dims.size() == 3, "load_fashion_mnist: images must have 3 dims, got ", images.dims.size());
  FT_CHECK(labels.dims.size() == 1, "load_fashion_mnist: labels must have 1 dim, got ", labels.dims.size());
  FT_CHECK(images.dims[0] == labels.dims[0], "load_fashion_mnist: ", images.dims[0], " images but ", labels.dims[0],
           " labels in ", dir, " (", split, ")");
  // Fashion-MNIST is 28×28; other sizes would only fail later, deep inside the first layer.
  FT_CHECK(images.dims[1] == 28 && images.dims[2] == 28, "load_fashion_mnist: '", dir, "/", split,
           "-images-idx3-ubyte.gz' holds ", images.dims[1], "x", images.dims[2], " images, Fashion-MNIST's are 28x28");
  const int64_t n = images.dims[0], pixels = images.dims[1] * images.dims[2];
  ImageDataset ds;
  ds.images = Tensor::empty({n, pixels}, DType::F32);
  ds.labels = Tensor::empty({n}, DType::I64);
  constexpr float kMean = 0.2860f, kStd = 0.3530f;
  float* img = ds.images.data<float>();
  for (size_t i = 0; i < images.data.size(); ++i) img[i] = (images.data[i] / 255.0f - kMean) / kStd;
  int64_t* lab = ds.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    FT_CHECK(labels.data[static_cast<size_t>(i)] < 10, "load_fashion_mnist: label ", int{labels.data[static_cast<size_t>(i)]},
             " at ", i, " is not a class in [0, 10)");
    lab[i] = labels.data[static_cast<size_t>(i)];
  }
  return ds;
}

}  // namespace ft
