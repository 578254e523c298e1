// The Fashion-MNIST splits as tensors, read from the gzipped IDX files that Debian's
// dataset-fashion-mnist installs.
#pragma once
#include <cstdint>
#include <string>

#include "lib/tensor.h"

namespace ft {

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
