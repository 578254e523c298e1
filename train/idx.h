// IDX files (the MNIST family's format), plain or gzipped, and the Fashion-MNIST splits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// A decoded IDX file: its dims and raw u8 payload.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Reads an IDX file of unsigned bytes (type code 0x08), gzipped or not. A bad magic, an
/// unsupported type, a payload shorter or longer than the header says, or a corrupt gzip
/// stream is an ft::Error naming the file.
IdxArray read_idx(const std::string& path);

/// Images as f32 [N, rows·cols] scaled to [0, 1] and standardized with the training set's
/// mean and std (0.2860, 0.3530); labels as i64 [N].
struct ImageDataset {
  Tensor images;
  Tensor labels;
  int64_t size() const { return labels.numel(); }
};

/// Loads `<dir>/<split>-images-idx3-ubyte.gz` and `<dir>/<split>-labels-idx1-ubyte.gz`
/// (split "train" or "t10k"); checks that image and label counts agree and labels are < 10.
ImageDataset load_fashion_mnist(const std::string& dir, const std::string& split);

}  // namespace ft
