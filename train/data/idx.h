// IDX files (the MNIST family's format), plain or gzipped. The format alone, without tensors:
// train/data/fashion_mnist.h turns the files into a dataset.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ft {

/// A decoded IDX file: its dims and raw u8 payload (data.size() is the product of dims).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Decodes the bytes of an IDX file of unsigned bytes (type code 0x08). A bad magic, an
/// unsupported type, or a payload shorter or longer than the header says is an ft::Error naming
/// `path`, where the bytes came from.
IdxArray parse_idx(const std::vector<uint8_t>& bytes, const std::string& path);

/// Reads the IDX file at `path`, gzipped or not (parse_idx's errors, and a corrupt gzip stream
/// is an ft::Error naming the file).
IdxArray read_idx(const std::string& path);

}  // namespace ft
