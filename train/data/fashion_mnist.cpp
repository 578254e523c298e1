#include "train/data/fashion_mnist.h"

#include "lib/error.h"
#include "train/data/idx.h"

namespace ft {

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
