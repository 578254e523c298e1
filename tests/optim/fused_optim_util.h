// What the fused-optimizer tests share: tolerances, parameter lists straddling the kernels'
// chunk boundaries, snapshots to compare, and the CUDA fixture (fused_optim_test.cpp,
// multi_tensor_cuda_test.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/runtime.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/multi_tensor.h"
#include "optim/sgd.h"
#include "tests/lib/test_util.h"

#if FT_WITH_CUDA
#include "lib/cuda/runtime.h"
#endif

namespace ft::test {

// ---- tolerances
//
// Fused and twin both compute in f32 but round at different points: the twin rounds after every
// primitive op, the kernel keeps intermediates in registers and may contract them into FMAs. So
// each step's values differ by a few f32 ulps (u = 6e-8) per element. Differences in m and v
// shrink by β every step; the master carries its difference forward, and 20 steps of a few ulps
// stay below ~40 ulps of |p| (5e-6 relative). Values that cancel toward zero (m, say) are
// measured against the tensor's RMS rather than their own size.
constexpr double kStateTolerance = 1e-5;
// A bf16 parameter is its f32 master rounded once; where the two masters differ by a few f32 ulps
// near a rounding midpoint, the bf16 copies differ by one bf16 spacing, at most 2^-7 of the value.
const double kBf16Spacing = std::ldexp(1.0, -7);
// Global norms summed in f32 in different orders (per chunk vs per tensor, over millions of squares)
// agree with each other and with an f64 sum to a few ulps times the depth of the sums.
constexpr double kNormTolerance = 1e-5;
// With clipping, each path scales by its own clip factor, max_norm / norm, and the norms agree to
// kNormTolerance: m ∝ clip and v ∝ clip² may then differ by 2·kNormTolerance relative on top of
// the rounding above (measured on the H100: 2.1e-5 for v).
constexpr double kClippedStateTolerance = 5e-5;

// ---- parameter lists

/// Which dtype the parameters of a list have: all f32 (each its own master), all bf16 (each
/// with an f32 master), or a mix in one optimizer (every third one bf16).
enum class ParamKind { F32, BF16, Mixed };

inline std::string param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::F32: return "f32";
    case ParamKind::BF16: return "bf16";
    case ParamKind::Mixed: return "mixed";
  }
  return "?";
}

inline void PrintTo(ParamKind kind, std::ostream* out) { *out << param_kind_name(kind); }

inline DType dtype_of(ParamKind kind, size_t index) {
  switch (kind) {
    case ParamKind::F32: return DType::F32;
    case ParamKind::BF16: return DType::BF16;
    case ParamKind::Mixed: return index % 3 == 1 ? DType::BF16 : DType::F32;
  }
  return DType::F32;
}

/// `count` shapes around multiples of the kernels' 4096-element unit (see the file comment);
/// 120 of them are ~5M elements, ~26M with the long tensor.
inline std::vector<Shape> chunk_straddling_shapes(size_t count, bool with_long_tensor = false) {
  static const std::vector<Shape> cycle = {{65535}, {256, 256}, {65537},  {3, 43691}, {1},  {3},      {1, 5},
                                           {1000},  {255, 257}, {65536},  {1, 65537}, {131073}, {1, 1}, {5},
                                           {40, 25}, {7}};
  std::vector<Shape> shapes;
  for (size_t i = 0; i < count; ++i) {
    // One tensor of 21M elements, most of the list's work: many blocks' shares lie inside it.
    // Only the main fused-vs-twin test carries it.
    shapes.push_back(with_long_tensor && !under_sanitizer() && i == 39 ? Shape{4097, 5119} : cycle[i % cycle.size()]);
  }
  return shapes;
}

/// A few small tensors for the CPU, where the twin runs element by element.
inline std::vector<Shape> small_shapes() { return {{4, 3}, {3}, {1}, {2, 5}, {7}, {1, 1}}; }

/// Uniform values in [-1, 1), drawn on the device: Tensor::randn draws on the host, which made
/// these tests spend most of their time generating ~30M numbers per step.
inline Tensor random_values(const Shape& shape, Generator& gen, DType dtype, Device device) {
  return cast(affine(Tensor::rand(shape, gen, DType::F32, device), 2.0, -1.0), dtype);
}

/// Leaves with uniform values in [-1, 1), dtype by `kind`, on `device`.
inline std::vector<Tensor> random_params(const std::vector<Shape>& shapes, ParamKind kind, Device device, Generator& gen) {
  std::vector<Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = random_values(shapes[i], gen, dtype_of(kind, i), device);
    p.requires_grad_();
    params.push_back(p);
  }
  return params;
}

/// New leaves with the same values (own storage), so two optimizers start from one point.
inline std::vector<Tensor> clone_params(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(fresh_leaf(p, p.dtype(), p.device()));
  return out;
}

/// Fresh standard normal gradients in each parameter's dtype; every set in `twins` gets copies of
/// the same values (its own storage, so no optimizer can see another's writes).
inline void set_random_grads(Generator& gen, const std::vector<Tensor>& params,
                      const std::vector<std::vector<Tensor>>& twins = {}) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = random_values(params[i].shape(), gen, params[i].dtype(), params[i].device());
    params[i].set_grad(g);
    for (const std::vector<Tensor>& twin : twins) twin[i].set_grad(fresh_copy(g, g.dtype(), g.device()));
  }
}

/// Overwrites element `index` of t (flat order) with `value`, in place.
inline void poke(const Tensor& t, int64_t index, double value) {
  t.reshape({t.numel()}).narrow(0, index, 1).copy_(Tensor::full({1}, value, t.dtype(), t.device()));
}

/// The gradients' global L2 norm, summed in f64 on the host.
inline double host_grad_norm(const std::vector<Tensor>& params) {
  double sum = 0.0;
  for (const Tensor& p : params)
    for (double x : p.grad().to_vector()) sum += x * x;
  return std::sqrt(sum);
}

// ---- comparisons

inline double rms(const std::vector<double>& v) { return v.empty() ? 0.0 : norm_of(v) / std::sqrt(double(v.size())); }

/// Every element within tol · (|expected_i| + rms(expected)) + spacing · max(|actual_i|,
/// |expected_i|) of expected: relative for ordinary values, relative to the tensor's typical size
/// where a value is near zero, plus `spacing` for values rounded to a coarse dtype. Element by
/// element, so that one element a kernel skipped at a chunk edge cannot hide in a norm over millions.
inline ::testing::AssertionResult elementwise_close(const Tensor& actual, const Tensor& expected, double tol,
                                             double spacing = 0.0) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != "
                                         << shape_str(expected.shape());
  const std::vector<double> a = actual.to_vector(), b = expected.to_vector();
  const double scale = rms(b);
  for (size_t i = 0; i < a.size(); ++i) {
    const double bound = tol * (std::abs(b[i]) + scale) + spacing * std::max(std::abs(a[i]), std::abs(b[i]));
    if (!(std::abs(a[i] - b[i]) <= bound))
      return ::testing::AssertionFailure() << std::setprecision(10) << "element " << i << " of "
                                           << shape_str(expected.shape()) << ": " << a[i] << " vs " << b[i]
                                           << " (allowed " << bound << ")";
  }
  return ::testing::AssertionSuccess();
}

/// A bf16 parameter is exactly its f32 master rounded to nearest (stochastic rounding is off).
inline ::testing::AssertionResult is_rounded_master(const Tensor& param, const Tensor& master) {
  const Tensor rounded = Tensor::from_vector(master.to_vector(), master.shape(), DType::BF16);
  return all_equal(param, rounded);
}

/// Raw bytes of tensors by name, read back to the host: what "untouched, bit for bit" compares.
using Snapshot = std::map<std::string, std::vector<uint8_t>>;

inline std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const Tensor host = t.to(kCPU);
  const auto* begin = static_cast<const uint8_t*>(host.data_ptr());
  return {begin, begin + host.nbytes()};
}

/// The parameters ("param.<i>") and, for AdamW, every per-parameter state tensor ("<i>.m", ...).
inline Snapshot snapshot(const std::vector<Tensor>& params, const AdamW* adamw = nullptr) {
  Snapshot out;
  for (size_t i = 0; i < params.size(); ++i) out["param." + std::to_string(i)] = raw_bytes(params[i]);
  if (adamw)
    for (const auto& [name, t] : adamw->state())
      if (name.find('.') != std::string::npos) out[name] = raw_bytes(t);  // not the step counts
  return out;
}

inline ::testing::AssertionResult same_bits(const Snapshot& actual, const Snapshot& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << actual.size() << " tensors vs " << expected.size();
  for (const auto& [name, bytes] : expected) {
    const auto it = actual.find(name);
    if (it == actual.end()) return ::testing::AssertionFailure() << "no '" << name << "'";
    if (it->second.size() != bytes.size())
      return ::testing::AssertionFailure() << "'" << name << "': " << it->second.size() << " bytes vs "
                                           << bytes.size();
    for (size_t b = 0; b < bytes.size(); ++b)
      if (it->second[b] != bytes[b]) return ::testing::AssertionFailure() << "'" << name << "' differs at byte " << b;
  }
  return ::testing::AssertionSuccess();
}

/// Fused against twin AdamW: masters and moments within kStateTolerance; bf16 parameters are each
/// their own master rounded, and within one bf16 spacing of each other.
inline void expect_adamw_states_close(const AdamW& fused, const std::vector<Tensor>& fused_params, const AdamW& twin,
                               const std::vector<Tensor>& twin_params, double tolerance = kStateTolerance) {
  const std::map<std::string, Tensor> fs = fused.state(), ts = twin.state();
  for (size_t i = 0; i < fused_params.size(); ++i) {
    const std::string k = std::to_string(i);
    SCOPED_TRACE("parameter " + k + " " + shape_str(fused_params[i].shape()) + " " +
                 dtype_name(fused_params[i].dtype()));
    for (const char* slot : {".master", ".m", ".v"})
      EXPECT_TRUE(elementwise_close(fs.at(k + slot), ts.at(k + slot), tolerance)) << slot;
    if (fused_params[i].dtype() == DType::BF16) {
      EXPECT_TRUE(is_rounded_master(fused_params[i], fs.at(k + ".master"))) << "fused";
      EXPECT_TRUE(is_rounded_master(twin_params[i], ts.at(k + ".master"))) << "twin";
      EXPECT_TRUE(elementwise_close(fused_params[i], twin_params[i], tolerance, kBf16Spacing));
    } else {
      EXPECT_TRUE(elementwise_close(fused_params[i], twin_params[i], tolerance)) << "param";
    }
  }
}

// ---- fixtures

/// CUDA tests over the three kinds of parameter list; they skip without a GPU.
class CudaParamKindTest : public ::testing::TestWithParam<ParamKind> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

inline std::string kind_test_name(const ::testing::TestParamInfo<ParamKind>& info) { return param_kind_name(info.param); }

inline const auto kAllKinds = ::testing::Values(ParamKind::F32, ParamKind::BF16, ParamKind::Mixed);

/// A warmup-then-cosine schedule, so every step of a run uses a different learning rate.
inline LRSchedule changing_schedule(int64_t steps, double max_lr) {
  return LRSchedule{.kind = LRSchedule::Kind::WarmupCosine, .max_lr = max_lr, .warmup_steps = steps / 4,
                    .total_steps = steps, .min_lr = max_lr / 10};
}

}  // namespace ft::test
