// Counter-based random numbers (Philox4x32-10) that are identical on the CPU and on CUDA.
#pragma once
#include <optional>

#include "lib/tensor.h"

namespace ft {

/// Which of lib/philox.h's counter layouts a uniform draw takes: a 32-bit word an element
/// (philox::uniform, on a 2⁻²⁴ grid: rand and normals) or a 16-bit half-word
/// (philox::dropout_uniform, on a 2⁻¹⁶ grid, 8 elements a Philox call: every dropout mask).
enum class UniformDraw { Word, DropoutHalfWord };

/// f32 uniforms in [0, 1): element i is philox::uniform(seed, offset, i), or
/// philox::dropout_uniform with UniformDraw::DropoutHalfWord. No gradient.
/// `offset` is a one-element i64 tensor on the result's device: kernels read it from memory, so
/// a captured CUDA graph uses whatever value the counter holds at replay.
Tensor philox_uniform(const Shape& shape, uint64_t seed, const Tensor& offset, UniformDraw draw = UniformDraw::Word);
/// The same with a host offset (wrapped in a one-element tensor on `device`).
Tensor philox_uniform(const Shape& shape, uint64_t seed, uint64_t offset, Device device = kCPU,
                      UniformDraw draw = UniformDraw::Word);

/// Host normals in `dtype` (floating): element i is Box-Muller in f64 on uniforms 2i and 2i + 1
/// of the draw keyed on (seed, offset), rounded to dtype as a cast from f64 rounds. With `scale`,
/// each rounded value is then scaled as `x * scale` (the affine op) scales it, so the result is
/// bit for bit philox_normal(...) * scale, in one pass. For initialization: Tensor::randn.
Tensor philox_normal(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype,
                     std::optional<double> scale = std::nullopt);

/// A one-element i64 tensor holding `offset` on `device`, for the ops that take offsets.
Tensor philox_offset(uint64_t offset, Device device);

/// The Philox counter dropout draws from, one per device, kept in that device's memory.
class PhiloxCounter {
 public:
  static PhiloxCounter& on(Device device);
  /// Reserves `count` values: returns a new one-element tensor holding the offset to use, the
  /// counter rounded up to a multiple of 8, and advances the counter past it by count rounded up
  /// to 8 (philox::kDropoutCountersPerBlock: a dropout pack of 8 is then one Philox call); one
  /// tiny kernel on CUDA, no sync.
  Tensor take(uint64_t count);
  /// A copy of the counter as it is now, and setting it back from one: device copies, no
  /// synchronization, so a captured step may use them. recompute re-runs a forward from the
  /// counter its first run started at, and so draws the same numbers.
  Tensor snapshot() const;
  void restore(const Tensor& snapshot);
  /// The current value (a synchronizing read).
  uint64_t value() const;
  void set(uint64_t value);

 private:
  explicit PhiloxCounter(Device device);
  Tensor counter_;
};

}  // namespace ft
