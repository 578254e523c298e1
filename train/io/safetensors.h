// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the bytes.
// PyTorch's `safetensors` package reads what save_safetensors writes.
#pragma once
#include <map>
#include <string>

#include "lib/tensor.h"
#include "train/io/safetensors_header.h"

namespace ft {

/// Writes `tensors` (from any device; copied to the host) and string metadata to `path`
/// atomically: a temporary file in the same folder is written, flushed to disk and renamed
/// over `path`, so a crash leaves either the old file or the new one, never a torn one.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // on the CPU
  std::map<std::string, std::string> metadata;
};

/// Reads a safetensors file. A short file, a header that is not valid JSON or overruns the file,
/// an unknown dtype, a byte range that does not match the shape or falls outside the data, or
/// overlapping ranges are each an ft::Error naming the file and the problem.
SafetensorsFile load_safetensors(const std::string& path);
/// The file's metadata alone: its header is read and checked, no tensor is.
std::map<std::string, std::string> load_safetensors_metadata(const std::string& path);
/// The file's header alone: each tensor's name, dtype, shape and byte range, and the metadata.
SafetensorsHeader load_safetensors_header(const std::string& path);
/// Rows [first, first + count) of tensor `name` (its first dim the rows), read alone: a shard of
/// a table larger than memory can be loaded piece by piece. A missing name or rows outside the
/// tensor are an ft::Error naming the file.
Tensor load_safetensors_rows(const std::string& path, const std::string& name, int64_t first, int64_t count);

}  // namespace ft
