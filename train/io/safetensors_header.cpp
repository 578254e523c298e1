#include "train/io/safetensors_header.h"

#include <algorithm>
#include <utility>

#include "lib/error.h"
#include "train/io/json.h"

namespace ft {

namespace {

bool parse_dtype(const std::string& name, DType* out) {
  for (DType d : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8})
    if (name == safetensors_dtype_name(d)) {
      *out = d;
      return true;
    }
  return false;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
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

uint64_t safetensors_header_length(const uint8_t (&length_bytes)[8], uint64_t file_size, const std::string& path) {
  FT_CHECK(file_size >= 8, "load_safetensors: '", path, "' is too short (", file_size, " bytes) for a header length");
  uint64_t header_size = 0;
  for (int b = 7; b >= 0; --b) header_size = (header_size << 8) | length_bytes[b];
  FT_CHECK(header_size <= file_size - 8, "load_safetensors: '", path, "' declares a ", header_size,
           "-byte header but only ", file_size - 8, " bytes follow (truncated or not a safetensors file)");
  FT_CHECK(header_size <= (100u << 20), "load_safetensors: '", path, "' declares an implausible ", header_size,
           "-byte header");
  return header_size;
}

SafetensorsHeader parse_safetensors_header(const std::string& json, uint64_t data_size, const std::string& path) {
  const JsonValue root =
      parse_json(json, "load_safetensors: '" + path + "': bad header JSON", JsonScalars::IntegersOnly);
  FT_CHECK(root.kind == JsonValue::Kind::Object, "load_safetensors: '", path,
           "': the header is not a JSON object");
  SafetensorsHeader out;
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
    SafetensorsEntry tensor;
    tensor.name = name;
    FT_CHECK(parse_dtype(dtype->text, &tensor.dtype), "load_safetensors: '", path, "': tensor '", name,
             "' has dtype '", dtype->text, "', which fusedtrain does not support");
    // The size in bytes, checked for overflow: a product that wrapped around could equal a small
    // byte range and pass a shape of 2^78 elements on to the allocation.
    uint64_t bytes = dtype_size(tensor.dtype);
    bool too_large = false;
    for (const auto& d : shape->items) {
      FT_CHECK(d.kind == Kind::Integer && d.integer >= 0 && d.integer < (int64_t{1} << 40), "load_safetensors: '",
               path, "': tensor '", name, "' has a bad dimension");
      tensor.shape.push_back(d.integer);
      too_large |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(d.integer), &bytes);
    }
    FT_CHECK(!too_large, "load_safetensors: '", path, "': tensor '", name, "' of shape ", shape_text(tensor.shape),
             " would take more than 2^64 bytes");
    const auto& b = offsets->items[0];
    const auto& e = offsets->items[1];
    FT_CHECK(b.kind == Kind::Integer && e.kind == Kind::Integer && b.integer >= 0 && e.integer >= b.integer,
             "load_safetensors: '", path, "': tensor '", name, "' has bad data_offsets");
    tensor.begin = static_cast<uint64_t>(b.integer);
    tensor.end = static_cast<uint64_t>(e.integer);
    FT_CHECK(tensor.end - tensor.begin == bytes, "load_safetensors: '", path, "': tensor '", name, "' spans ",
             tensor.end - tensor.begin, " bytes but ", dtype->text, " ", shape_text(tensor.shape), " needs ", bytes);
    FT_CHECK(tensor.end <= data_size, "load_safetensors: '", path, "': tensor '", name, "' ends at byte ", tensor.end,
             " past the ", data_size, " data bytes (truncated file)");
    out.tensors.push_back(std::move(tensor));
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const SafetensorsEntry& t : out.tensors) ranges.emplace_back(t.begin, t.end);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    FT_CHECK(ranges[i].first >= ranges[i - 1].second, "load_safetensors: '", path, "': two tensors' byte ranges overlap");
  return out;
}

}  // namespace ft
