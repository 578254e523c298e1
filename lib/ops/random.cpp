#include "lib/ops/random.h"

#include "lib/cuda/launchers.h"
#include "lib/philox.h"

namespace ft {

Tensor philox_uniform(const Shape& shape, uint64_t seed, uint64_t offset, Device device) {
  Tensor out = Tensor::empty(shape, DType::F32, device);
  if (out.numel() == 0) return out;
  if (device.is_cuda()) {
    cuda::philox_uniform(out, seed, offset);
    return out;
  }
  float* p = out.data<float>();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) p[i] = philox::uniform(seed, offset, static_cast<uint64_t>(i));
  return out;
}

}  // namespace ft
