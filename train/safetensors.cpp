#include "train/safetensors.h"

#include <algorithm>
#include <fstream>
#include <vector>

#include "lib/error.h"
#include "train/atomic_file.h"
#include "train/json.h"

namespace ft {

namespace {

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

bool parse_dtype(const std::string& name, DType* out) {
  for (DType d : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8})
    if (name == safetensors_dtype(d)) {
      *out = d;
      return true;
    }
  return false;
}

}  // namespace

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
    header += json_quote(name) + ":{\"dtype\":\"" + safetensors_dtype(tensor.dtype()) +
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

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in.good(), "load_safetensors: cannot open '", path, "'");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  FT_CHECK(file_size >= 8, "load_safetensors: '", path, "' is too short (", file_size, " bytes) for a header length");
  uint8_t length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t header_size = 0;
  for (int b = 7; b >= 0; --b) header_size = (header_size << 8) | length_bytes[b];
  FT_CHECK(header_size <= file_size - 8, "load_safetensors: '", path, "' declares a ", header_size,
           "-byte header but only ", file_size - 8, " bytes follow (truncated or not a safetensors file)");
  FT_CHECK(header_size <= (100u << 20), "load_safetensors: '", path, "' declares an implausible ", header_size,
           "-byte header");
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  FT_CHECK(in.good(), "load_safetensors: reading the header of '", path, "' failed");
  const uint64_t data_size = file_size - 8 - header_size;

  const JsonValue root =
      parse_json(header, "load_safetensors: '" + path + "': bad header JSON", JsonScalars::IntegersOnly);
  FT_CHECK(root.kind == JsonValue::Kind::Object, "load_safetensors: '", path,
           "': the header is not a JSON object");
  SafetensorsFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : root.members) {
    using Kind = JsonValue::Kind;
    if (name == "__metadata__") {
      FT_CHECK(entry.kind == Kind::Object, "load_safetensors: '", path, "': __metadata__ must be an object");
      for (const auto& [key, value] : entry.members) {
        FT_CHECK(value.kind == Kind::String, "load_safetensors: '", path, "': metadata '", key, "' is not a string");
        out.metadata[key] = value.text;
      }
      continue;
    }
    FT_CHECK(entry.kind == Kind::Object, "load_safetensors: '", path, "': entry '", name, "' is not an object");
    const JsonValue *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [key, value] : entry.members) {
      if (key == "dtype") dtype = &value;
      else if (key == "shape") shape = &value;
      else if (key == "data_offsets") offsets = &value;
    }
    FT_CHECK(dtype && dtype->kind == Kind::String && shape && shape->kind == Kind::Array && offsets &&
                 offsets->kind == Kind::Array && offsets->items.size() == 2,
             "load_safetensors: '", path, "': entry '", name, "' needs dtype, shape and two data_offsets");
    DType dt;
    FT_CHECK(parse_dtype(dtype->text, &dt), "load_safetensors: '", path, "': tensor '", name, "' has dtype '",
             dtype->text, "', which fusedtrain does not support");
    Shape dims;
    uint64_t count = 1;
    for (const auto& d : shape->items) {
      FT_CHECK(d.kind == Kind::Integer && d.integer >= 0 && d.integer < (int64_t{1} << 40), "load_safetensors: '",
               path, "': tensor '", name, "' has a bad dimension");
      dims.push_back(d.integer);
      count *= static_cast<uint64_t>(d.integer);
    }
    const auto& b = offsets->items[0];
    const auto& e = offsets->items[1];
    FT_CHECK(b.kind == Kind::Integer && e.kind == Kind::Integer && b.integer >= 0 && e.integer >= b.integer,
             "load_safetensors: '", path, "': tensor '", name, "' has bad data_offsets");
    const uint64_t begin = static_cast<uint64_t>(b.integer), end = static_cast<uint64_t>(e.integer);
    FT_CHECK(end - begin == count * dtype_size(dt), "load_safetensors: '", path, "': tensor '", name, "' spans ",
             end - begin, " bytes but ", dtype->text, " ", shape_str(dims), " needs ", count * dtype_size(dt));
    FT_CHECK(end <= data_size, "load_safetensors: '", path, "': tensor '", name, "' ends at byte ", end,
             " past the ", data_size, " data bytes (truncated file)");
    ranges.emplace_back(begin, end);
    Tensor t = Tensor::empty(dims, dt, kCPU);
    in.seekg(static_cast<std::streamoff>(8 + header_size + begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(end - begin));
    FT_CHECK(in.good() || end == begin, "load_safetensors: reading tensor '", name, "' from '", path, "' failed");
    out.tensors.emplace(name, t);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    FT_CHECK(ranges[i].first >= ranges[i - 1].second, "load_safetensors: '", path, "': two tensors' byte ranges overlap");
  return out;
}

}  // namespace ft
