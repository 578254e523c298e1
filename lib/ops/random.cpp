#include "lib/ops/random.h"

#include <map>
#include <memory>
#include <mutex>

#include "lib/cuda/launchers.h"
#include "lib/error.h"
#include "lib/philox.h"

namespace ft {

Tensor philox_offset(uint64_t offset, Device device) {
  return Tensor::full({1}, static_cast<double>(offset), DType::I64, device);
}

Tensor philox_uniform(const Shape& shape, uint64_t seed, uint64_t offset, Device device) {
  return philox_uniform(shape, seed, philox_offset(offset, device));
}

Tensor philox_uniform(const Shape& shape, uint64_t seed, const Tensor& offset) {
  check_defined(offset, "philox_uniform", "offset");
  FT_CHECK(offset.dtype() == DType::I64 && offset.numel() == 1, "philox_uniform: offset must be one i64 element, got ",
           dtype_name(offset.dtype()), " ", shape_str(offset.shape()));
  const Device device = offset.device();
  Tensor out = Tensor::empty(shape, DType::F32, device);
  if (out.numel() == 0) return out;
  if (device.is_cuda()) {
    cuda::philox_uniform(out, seed, offset);
    return out;
  }
  const uint64_t base = static_cast<uint64_t>(*offset.data<int64_t>());
  float* p = out.data<float>();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) p[i] = philox::uniform(seed, base, static_cast<uint64_t>(i));
  return out;
}

PhiloxCounter::PhiloxCounter(Device device) : counter_(philox_offset(0, device)) {}

PhiloxCounter& PhiloxCounter::on(Device device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::unique_ptr<PhiloxCounter>> counters;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = counters[{static_cast<int>(device.type), device.index}];
  if (!slot) slot.reset(new PhiloxCounter(device));
  return *slot;
}

Tensor PhiloxCounter::take(uint64_t count) {
  const uint64_t step = (count + 3) / 4 * 4;  // keeps every offset a multiple of 4
  Tensor used = Tensor::empty({1}, DType::I64, counter_.device());
  if (counter_.is_cuda()) {
    cuda::philox_take(counter_, used, step);
  } else {
    *used.data<int64_t>() = *counter_.data<int64_t>();
    *counter_.data<int64_t>() += static_cast<int64_t>(step);
  }
  return used;
}

uint64_t PhiloxCounter::value() const { return static_cast<uint64_t>(counter_.item()); }
void PhiloxCounter::set(uint64_t value) { counter_.copy_(philox_offset(value, kCPU)); }

}  // namespace ft
