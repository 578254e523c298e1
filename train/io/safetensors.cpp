#include "train/io/safetensors.h"

#include <fstream>
#include <utility>
#include <vector>

#include "lib/error.h"
#include "train/io/atomic_file.h"
#include "train/io/json.h"
#include "train/io/safetensors_header.h"

namespace ft {

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // std::map orders names, so the file's layout is deterministic.
  std::vector<Tensor> host;
  std::string header = "{";
  size_t offset = 0;
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first_meta = true;
    for (const auto& [key, value] : metadata) {
      if (!first_meta) header += ',';
      header += json_quote(key);
      header += ':';
      header += json_quote(value);
      first_meta = false;
    }
    header += "}";
    first = false;
  }
  for (const auto& [name, tensor] : tensors) {
    check_defined(tensor, "save_safetensors", name.c_str());
    FT_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    host.push_back(tensor.detach().to(kCPU));
    std::string shape = "[";
    for (size_t d = 0; d < tensor.shape().size(); ++d) {
      if (d) shape += ',';
      shape += std::to_string(tensor.shape()[d]);
    }
    shape += ']';
    const size_t bytes = tensor.nbytes();
    if (!first) header += ',';
    header += json_quote(name) + ":{\"dtype\":\"" + safetensors_dtype_name(tensor.dtype()) +
              "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
    first = false;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the format's recommended alignment

  AtomicFile file(path, "save_safetensors");
  uint8_t length[8];
  for (int b = 0; b < 8; ++b) length[b] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * b));
  file.write(length, 8);
  file.write(header.data(), header.size());
  for (const Tensor& t : host) file.write(t.data_ptr(), t.nbytes());
  file.commit();
}

namespace {

// The file's parsed header, every range checked, and the header's length; `in` is left open.
std::pair<SafetensorsHeader, uint64_t> read_header(std::ifstream& in, const std::string& path) {
  FT_CHECK(in.good(), "load_safetensors: cannot open '", path, "'");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  uint8_t length_bytes[8] = {};
  in.read(reinterpret_cast<char*>(length_bytes), 8);  // a shorter file fails the length's checks
  const uint64_t header_size = safetensors_header_length(length_bytes, file_size, path);
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  FT_CHECK(in.good(), "load_safetensors: reading the header of '", path, "' failed");
  return {parse_safetensors_header(header, file_size - 8 - header_size, path), header_size};
}

}  // namespace

std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return read_header(in, path).first.metadata;
}

SafetensorsHeader load_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return read_header(in, path).first;
}

Tensor load_safetensors_rows(const std::string& path, const std::string& name, int64_t first, int64_t count) {
  std::ifstream in(path, std::ios::binary);
  const auto [parsed, header_size] = read_header(in, path);
  for (const SafetensorsEntry& entry : parsed.tensors) {
    if (entry.name != name) continue;
    FT_CHECK(!entry.shape.empty() && first >= 0 && count >= 0 && first + count <= entry.shape[0],
             "load_safetensors_rows: rows [", first, ", ", first + count, ") are outside '", name, "' ",
             shape_str(entry.shape), " in '", path, "'");
    Shape shape = entry.shape;
    shape[0] = count;
    Tensor t = Tensor::empty(shape, entry.dtype, kCPU);
    const uint64_t row_bytes = entry.shape[0] > 0 ? (entry.end - entry.begin) / static_cast<uint64_t>(entry.shape[0]) : 0;
    in.seekg(static_cast<std::streamoff>(8 + header_size + entry.begin + static_cast<uint64_t>(first) * row_bytes));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(static_cast<uint64_t>(count) * row_bytes));
    FT_CHECK(in.good() || count == 0, "load_safetensors_rows: reading rows of '", name, "' from '", path, "' failed");
    return t;
  }
  FT_FAIL("load_safetensors_rows: '", path, "' holds no tensor '", name, "'");
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  // Every range is checked before the first tensor is allocated.
  const auto [parsed, header_size] = read_header(in, path);
  SafetensorsFile out;
  out.metadata = parsed.metadata;
  for (const SafetensorsEntry& entry : parsed.tensors) {
    Tensor t = Tensor::empty(entry.shape, entry.dtype, kCPU);
    in.seekg(static_cast<std::streamoff>(8 + header_size + entry.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(entry.end - entry.begin));
    FT_CHECK(in.good() || entry.end == entry.begin, "load_safetensors: reading tensor '", entry.name, "' from '", path,
             "' failed");
    out.tensors.emplace(entry.name, t);
  }
  return out;
}

}  // namespace ft
