#include "lib/ops/random/random.h"

#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include "lib/cpu_dispatch.h"
#include "lib/elementwise_math.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/random/random_cuda.h"
#include "lib/philox.h"

namespace ft {

namespace {

// Uniforms k = 0..3 are philox::uniform(seed, 0, first + k). One Philox block serves all four
// when `first` is a multiple of 4, as every offset the Generator reserves is; other offsets take
// two blocks. Either way this is a quarter or half of the blocks a per-element call computes.
void four_uniforms(uint64_t seed, uint64_t first, float out[4]) {
  const unsigned skip = static_cast<unsigned>(first & 3);
  const philox::Uint4 a = philox::block_bits(seed, first >> 2);
  uint32_t lanes[8] = {a.x, a.y, a.z, a.w, 0u, 0u, 0u, 0u};
  if (skip != 0) {
    const philox::Uint4 b = philox::block_bits(seed, (first >> 2) + 1);
    lanes[4] = b.x, lanes[5] = b.y, lanes[6] = b.z, lanes[7] = b.w;
  }
  for (unsigned k = 0; k < 4; ++k) out[k] = philox::to_uniform(lanes[skip + k]);
}

// p[k] = philox::dropout_uniform(seed, base, k) for k < n: one Philox block for each 8 counters.
void fill_dropout_uniforms(float* p, int64_t n, uint64_t seed, uint64_t base) {
  const uint64_t first_block = base >> 3, blocks = ((base + static_cast<uint64_t>(n) - 1) >> 3) - first_block + 1;
#pragma omp parallel for if (n > 65536)
  for (int64_t b = 0; b < static_cast<int64_t>(blocks); ++b) {
    const uint64_t block = first_block + static_cast<uint64_t>(b);
    const philox::Uint4 bits = philox::block_bits(seed, block);
    for (unsigned h = 0; h < 8; ++h) {
      const uint64_t counter = block * 8 + h;
      if (counter >= base && counter - base < static_cast<uint64_t>(n))
        p[counter - base] = philox::to_dropout_uniform(philox::half_word(bits, h));
    }
  }
}

// Elements 2j and 2j + 1 take uniforms 4j .. 4j + 3, so a pair shares its Philox block. Each
// normal is computed in f64 and rounded once into T, as randn's f64 draw and cast always did.
template <class T>
void fill_normal(T* p, int64_t n, uint64_t seed, uint64_t offset, const std::optional<double>& scale) {
  using A = cpu::acc_t<T>;
  const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for if (n > 65536)
  for (int64_t j = 0; j < pairs; ++j) {
    float u[4];
    four_uniforms(seed, offset + 4 * static_cast<uint64_t>(j), u);
    for (int64_t k = 0; k < 2 && 2 * j + k < n; ++k) {
      const int64_t i = 2 * j + k;
      const double u1 = u[2 * k], u2 = u[2 * k + 1];
      cpu::store(p, i, std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2));
      if (scale)
        cpu::store(p, i, apply_unary<A>(UnaryOp::Affine, cpu::load(p, i), static_cast<A>(*scale), A(0)));
    }
  }
}

}  // namespace

Tensor philox_offset(uint64_t offset, Device device) {
  return Tensor::full({1}, static_cast<double>(offset), DType::I64, device);
}

Tensor philox_uniform(const Shape& shape, uint64_t seed, uint64_t offset, Device device, UniformDraw draw) {
  return philox_uniform(shape, seed, philox_offset(offset, device), draw);
}

Tensor philox_uniform(const Shape& shape, uint64_t seed, const Tensor& offset, UniformDraw draw) {
  check_defined(offset, "philox_uniform", "offset");
  FT_CHECK(offset.dtype() == DType::I64 && offset.numel() == 1, "philox_uniform: offset must be one i64 element, got ",
           dtype_name(offset.dtype()), " ", shape_str(offset.shape()));
  const Device device = offset.device();
  Tensor out = Tensor::empty(shape, DType::F32, device);
  if (out.numel() == 0) return out;
  if (device.is_cuda()) {
    if constexpr (kCudaBuild) cuda::philox_uniform(out, seed, offset, draw == UniformDraw::DropoutHalfWord);
    return out;
  }
  const uint64_t base = static_cast<uint64_t>(*offset.data<int64_t>());
  float* p = out.data<float>();
  const int64_t n = out.numel();
  if (draw == UniformDraw::DropoutHalfWord) {
    fill_dropout_uniforms(p, n, seed, base);
    return out;
  }
#pragma omp parallel for if (n > 65536)
  for (int64_t g = 0; g < (n + 3) / 4; ++g) {
    float u[4];
    four_uniforms(seed, base + 4 * static_cast<uint64_t>(g), u);
    for (int64_t k = 0; k < 4 && 4 * g + k < n; ++k) p[4 * g + k] = u[k];
  }
  return out;
}

Tensor philox_normal(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype, std::optional<double> scale) {
  Tensor out = Tensor::empty(shape, dtype, kCPU);
  cpu::dispatch_floating(dtype, "philox_normal", [&](auto tag) {
    fill_normal(out.data<decltype(tag)>(), out.numel(), seed, offset, scale);
  });
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
  constexpr uint64_t kMultiple = philox::kDropoutCountersPerBlock;
  const uint64_t step = (count + kMultiple - 1) / kMultiple * kMultiple;
  Tensor used = Tensor::empty({1}, DType::I64, counter_.device());
  if (counter_.is_cuda()) {
    if constexpr (kCudaBuild) cuda::philox_take(counter_, used, step);
  } else {
    const int64_t at = philox::aligned_dropout_offset(*counter_.data<int64_t>());
    *used.data<int64_t>() = at;
    *counter_.data<int64_t>() = at + static_cast<int64_t>(step);
  }
  return used;
}

Tensor PhiloxCounter::snapshot() const {
  Tensor copy = Tensor::empty({1}, DType::I64, counter_.device());
  copy.copy_(counter_);
  return copy;
}
void PhiloxCounter::restore(const Tensor& snapshot) { counter_.copy_(snapshot); }

uint64_t PhiloxCounter::value() const { return static_cast<uint64_t>(counter_.item()); }
void PhiloxCounter::set(uint64_t value) { counter_.copy_(philox_offset(value, kCPU)); }

// ---- Tensor's random constructors (declared in lib/tensor.h, drawn by this op)

Tensor Tensor::rand(const Shape& shape, Generator& gen, DType dtype, Device device) {
  FT_CHECK(is_floating(dtype), "rand: expected a floating dtype, got ", dtype_name(dtype));
  Tensor u = philox_uniform(shape, gen.seed(), gen.advance(static_cast<uint64_t>(shape_numel(shape))), device);
  return dtype == DType::F32 ? u : cast(u, dtype);
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype, Device device) {
  FT_CHECK(is_floating(dtype), "randn: expected a floating dtype, got ", dtype_name(dtype));
  // Drawn on the host so every device sees the same values; used for initialization only.
  const uint64_t offset = gen.advance(static_cast<uint64_t>(2 * shape_numel(shape)));
  return philox_normal(shape, gen.seed(), offset, dtype).to(device);
}

Tensor Tensor::normal(const Shape& shape, Generator& gen, double std, DType dtype, Device device) {
  FT_CHECK(is_floating(dtype), "normal: expected a floating dtype, got ", dtype_name(dtype));
  const uint64_t offset = gen.advance(static_cast<uint64_t>(2 * shape_numel(shape)));
  return philox_normal(shape, gen.seed(), offset, dtype, std).to(device);
}

}  // namespace ft
