// The safetensors format without the tensors: the 8-byte little-endian header length and the JSON
// header naming each tensor's dtype, shape and byte range. train/io/safetensors.h reads and writes
// whole files through it; kept apart so that the header parser runs on bytes alone (its fuzz
// target links no tensor library).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/dtype.h"

namespace ft {

/// One tensor of the header: its bytes are [begin, end) of the data after the header.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in file order
  std::map<std::string, std::string> metadata;
};

/// The safetensors name of `dtype` ("F32", "BF16", ...).
const char* safetensors_dtype_name(DType dtype);

/// The header's length, read from the file's first 8 bytes, checked against the file's size: a
/// file shorter than 8 bytes, or a header longer than what follows or than 100 MB, is an
/// ft::Error naming `path`.
uint64_t safetensors_header_length(const uint8_t (&length_bytes)[8], uint64_t file_size, const std::string& path);

/// Parses the JSON header of the file `path`, whose data (after the header) holds `data_size`
/// bytes. A header that is not a JSON object, an entry without dtype, shape and two data_offsets,
/// a dtype fusedtrain does not support, a byte range other than the shape's size (or a shape whose
/// size passes 2^64 bytes), a range past the data, or two overlapping ranges is an ft::Error
/// naming `path`. So every returned range lies inside the data: nothing a header claims can make
/// a reader allocate more than the file holds.
SafetensorsHeader parse_safetensors_header(const std::string& json, uint64_t data_size, const std::string& path);

}  // namespace ft
