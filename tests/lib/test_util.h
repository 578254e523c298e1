// Helpers shared by the core library tests: per-test random inputs, error norms, a
// central-difference gradient checker in f64, a device-vs-f64-reference comparison, and the
// device × dtype and device × KernelMode parametrizations.
//
// The CPU in f64 is the reference every test checks against (DESIGN.md). CUDA parameters skip
// themselves when no GPU is visible, so the same binary runs on CPU-only CI and on an H100.
#pragma once
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/runtime.h"
#include "lib/tensor.h"

/// Skips the current test (return from its body or SetUp) when `device` is CUDA and no GPU is
/// visible. A plain function could not do this: GTEST_SKIP() only returns from its own frame.
#define FT_SKIP_UNLESS_AVAILABLE(device)                                                 \
  do {                                                                                  \
    if ((device).is_cuda() && !::ft::cuda_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

/// Expects `statement` to throw ft::Error whose message contains `word` (an op name, say).
/// The statement runs twice, once per check, so it must not depend on earlier runs.
#define EXPECT_FT_ERROR(statement, word)                                                  \
  do {                                                                                   \
    EXPECT_THROW(statement, ::ft::Error);                                                \
    EXPECT_TRUE(::ft::test::error_mentions([&] { statement; }, word)) << #statement;     \
  } while (0)

namespace ft::test {

// ---- sizes under a sanitizer
//
// scripts/device/run.sh sanitize sets FT_UNDER_SANITIZER=1 for the processes it runs under a
// compute-sanitizer tool. Racecheck slows every memory access ~100x, and the few tests whose
// size serves only the plain run (the optimizer's fused-vs-twin runs over 120 tensors, one of
// them 21M elements, for 20 steps) then take longer than a whole device call. Under a tool they
// take fewer steps and leave out the long tensor; every kernel and code path stays the same.
inline bool under_sanitizer() { return runtime::env_switch("FT_UNDER_SANITIZER"); }

/// `full` in a plain run, `under_tool` (fewer) under a sanitizer.
inline int64_t steps_for_this_run(int64_t full, int64_t under_tool) { return under_sanitizer() ? under_tool : full; }

// ---- tolerances
//
// Norm-wise relative errors against a CPU f64 reference computed on the same (rounded) inputs.
// f32 results round once or a few times (u = 6e-8), bf16 ones at u = 2^-8 = 3.9e-3. Gradients
// pass through a chain of rounded primitives, so they get twice the forward budget.
inline double forward_tolerance(DType dtype) {
  switch (dtype) {
    case DType::F64: return 1e-12;
    case DType::F32: return 1e-5;
    case DType::BF16: return 1e-2;
    default: return 0.0;  // integer and boolean results must match exactly
  }
}
inline double grad_tolerance(DType dtype) { return 2.0 * forward_tolerance(dtype); }

/// Half the spacing of 1.0: the largest relative error of one rounding to dtype.
inline double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::F64: return std::ldexp(1.0, -53);
    case DType::F32: return std::ldexp(1.0, -24);
    case DType::BF16: return std::ldexp(1.0, -8);
    default: return 0.0;
  }
}

// ---- seeds and inputs

/// A seed derived from the running test's full name, so every test (and every parameter of a
/// parametrized test) draws its own inputs, and a failure replays with the same ones. Setting
/// FT_TEST_SEED=<text> mixes in other inputs, to probe tolerances over many draws.
inline uint64_t test_seed(uint64_t salt = 0) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "no-test";
  if (const char* extra = std::getenv("FT_TEST_SEED")) name += std::string("#") + extra;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h ^ (salt * 0x9E3779B97F4A7C15ull);
}
inline Generator test_generator(uint64_t salt = 0) { return Generator(test_seed(salt)); }

/// Standard normal values (never all zeros), converted to dtype and placed on device.
inline Tensor random_tensor(const Shape& shape, DType dtype, Device device, Generator& gen) {
  return Tensor::randn(shape, gen, dtype, device);
}

/// Uniform values in [lo, hi).
inline Tensor uniform_tensor(const Shape& shape, DType dtype, Device device, Generator& gen, double lo, double hi) {
  std::vector<double> v = Tensor::rand(shape, gen, DType::F64, kCPU).to_vector();
  for (double& x : v) x = lo + (hi - lo) * x;
  return Tensor::from_vector(v, shape, dtype, device);
}

/// Values in [0.5, 2), for ops whose domain is positive (log, sqrt, rsqrt, pow, divisors).
inline Tensor positive_tensor(const Shape& shape, DType dtype, Device device, Generator& gen) {
  return uniform_tensor(shape, dtype, device, gen, 0.5, 2.0);
}

/// Magnitudes uniform in [0.5, 2) with random signs: norm gains. The fused norms' backward
/// takes x̂ = (out − b)/w from their rounded output, which loses about u·|b/w| near w = 0
/// (lib/ops/norm/layer_norm.h); trained gains stay away from 0, and so do these.
inline Tensor gain_tensor(const Shape& shape, DType dtype, Device device, Generator& gen) {
  std::vector<double> v = Tensor::rand(shape, gen, DType::F64, kCPU).to_vector();
  const std::vector<double> sign = Tensor::rand(shape, gen, DType::F64, kCPU).to_vector();
  for (size_t i = 0; i < v.size(); ++i) v[i] = (sign[i] < 0.5 ? -1.0 : 1.0) * (0.5 + 1.5 * v[i]);
  return Tensor::from_vector(v, shape, dtype, device);
}

/// Integer ids uniform in [0, limit).
inline Tensor random_ids(const Shape& shape, int64_t limit, DType dtype, Device device, Generator& gen) {
  std::vector<double> v = Tensor::rand(shape, gen, DType::F64, kCPU).to_vector();
  for (double& x : v) x = std::min<double>(static_cast<double>(limit - 1), std::floor(x * static_cast<double>(limit)));
  return Tensor::from_vector(v, shape, dtype, device);
}

/// A new leaf (own storage, no history) holding src's values converted to dtype on device.
inline Tensor fresh_copy(const Tensor& src, DType dtype, Device device) {
  Tensor out = Tensor::empty(src.shape(), dtype, device);
  out.copy_(src.detach());
  return out;
}
inline Tensor fresh_leaf(const Tensor& src, DType dtype, Device device) {
  Tensor out = fresh_copy(src, dtype, device);
  out.requires_grad_();
  return out;
}

// ---- error norms

/// ‖a − b‖ / ‖b‖ over all elements (as doubles); the absolute ‖a − b‖ when b is all zeros;
/// infinity when the element counts differ or a value is NaN.
inline double max_rel_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  if (va.size() != vb.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    diff += (va[i] - vb[i]) * (va[i] - vb[i]);
    norm += vb[i] * vb[i];
  }
  if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

inline double norm_of(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum);
}

/// Succeeds when actual has expected's shape and ‖actual − expected‖ <= tol · ‖expected‖ +
/// allowance (relative alone when the allowance is 0: max_rel_error(actual, expected) <= tol).
/// The failure names the error and the worst element.
inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double tol,
                                            double allowance = 0.0) {
  if (!actual.defined() || !expected.defined())
    return ::testing::AssertionFailure() << "undefined tensor: actual " << actual.defined() << ", expected "
                                         << expected.defined();
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  const double err = max_rel_error(actual, expected);
  const std::vector<double> va = actual.to_vector(), vb = expected.to_vector();
  std::vector<double> diff(va.size());
  for (size_t i = 0; i < va.size(); ++i) diff[i] = va[i] - vb[i];
  const double diff_norm = norm_of(diff), norm = norm_of(vb);
  if (err <= tol || diff_norm <= tol * norm + allowance) return ::testing::AssertionSuccess();
  size_t worst = 0;
  double worst_diff = -1.0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double d = std::isnan(va[i]) != std::isnan(vb[i]) ? std::numeric_limits<double>::infinity()
                                                           : std::abs(va[i] - vb[i]);
    if (d > worst_diff) worst_diff = d, worst = i;
  }
  auto failure = ::testing::AssertionFailure();
  failure << std::setprecision(10) << "relative error " << err << " > " << tol << " for shape "
          << shape_str(expected.shape());
  if (allowance > 0.0) failure << " (and |diff| " << diff_norm << " > " << tol * norm + allowance << " allowed)";
  if (!va.empty()) failure << "; worst element " << worst << ": " << va[worst] << " vs expected " << vb[worst];
  return failure;
}

/// Element-by-element equality (for bit-exact comparisons such as masks and casts).
inline ::testing::AssertionResult all_equal(const Tensor& actual, const Tensor& expected) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  const std::vector<double> va = actual.to_vector(), vb = expected.to_vector();
  for (size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i]) && !(std::isnan(va[i]) && std::isnan(vb[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " != expected " << vb[i];
  return ::testing::AssertionSuccess();
}

/// True when f throws ft::Error whose message contains `word`; false (with the message) otherwise.
template <class F>
::testing::AssertionResult error_mentions(F&& f, const std::string& word) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.find(word) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message '" << message << "' does not mention '" << word << "'";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-ft::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw (expected an error mentioning '" << word << "')";
}

// ---- gradient checking

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradCheckOptions {
  double eps = 1e-6;
  double tol = 1e-6;
  /// Which inputs to differentiate; empty means every floating input.
  std::vector<bool> wrt = {};
};

/// Central-difference gradient check in f64 on the CPU. The loss is sum_all(f(x) · w) for a
/// random w of f's output shape; the analytic gradient comes from backward(), the numeric one
/// from (L(x + eps·e_j) − L(x − eps·e_j)) / 2eps per element, with L evaluated in doubles here.
/// Passes when ‖analytic − numeric‖ / max(‖numeric‖, 1) <= tol for every checked input (the
/// floor keeps finite-difference noise from failing an exactly-zero gradient).
inline ::testing::AssertionResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, Generator& gen,
                                            const GradCheckOptions& options = {}) {
  const size_t n = inputs.size();
  std::vector<bool> wrt(n, false);
  std::vector<Tensor> leaves(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined()) continue;
    if (x.device() != kCPU) return ::testing::AssertionFailure() << "gradcheck: input " << i << " is not on the CPU";
    wrt[i] = is_floating(x.dtype()) && (options.wrt.empty() || options.wrt[i]);
    if (wrt[i] && x.dtype() != DType::F64)
      return ::testing::AssertionFailure() << "gradcheck: input " << i << " must be f64";
    leaves[i] = wrt[i] ? fresh_leaf(x, DType::F64, kCPU) : x;
  }
  Tensor y = f(leaves);
  if (!y.defined() || y.dtype() != DType::F64)
    return ::testing::AssertionFailure() << "gradcheck: f must return an f64 tensor";
  if (!y.requires_grad()) return ::testing::AssertionFailure() << "gradcheck: f's output has no history";
  const Tensor w = random_tensor(y.shape(), DType::F64, kCPU, gen);
  const std::vector<double> wv = w.to_vector();
  sum_all(mul(y, w)).backward();

  auto loss_at = [&](size_t i, const std::vector<double>& values) {
    NoGradGuard no_grad;
    std::vector<Tensor> args(n);
    for (size_t k = 0; k < n; ++k) args[k] = k == i ? Tensor::from_vector(values, inputs[i].shape(), DType::F64) : inputs[k];
    const std::vector<double> out = f(args).to_vector();
    double loss = 0.0;
    for (size_t k = 0; k < out.size(); ++k) loss += out[k] * wv[k];
    return loss;
  };

  for (size_t i = 0; i < n; ++i) {
    if (!wrt[i]) continue;
    std::vector<double> values = inputs[i].to_vector();
    std::vector<double> numeric(values.size());
    for (size_t j = 0; j < values.size(); ++j) {
      const double saved = values[j];
      values[j] = saved + options.eps;
      const double plus = loss_at(i, values);
      values[j] = saved - options.eps;
      const double minus = loss_at(i, values);
      values[j] = saved;
      numeric[j] = (plus - minus) / (2.0 * options.eps);
    }
    const Tensor grad = leaves[i].grad();
    std::vector<double> analytic(values.size(), 0.0);
    if (grad.defined()) {
      if (grad.shape() != inputs[i].shape() || grad.dtype() != DType::F64)
        return ::testing::AssertionFailure() << "gradcheck: gradient of input " << i << " has shape "
                                             << shape_str(grad.shape()) << " " << dtype_name(grad.dtype())
                                             << ", expected " << shape_str(inputs[i].shape()) << " f64";
      analytic = grad.to_vector();
    }
    double diff = 0.0, norm = 0.0, worst = -1.0;
    size_t worst_at = 0;
    for (size_t j = 0; j < values.size(); ++j) {
      const double d = std::abs(analytic[j] - numeric[j]);
      diff += d * d;
      norm += numeric[j] * numeric[j];
      if (d > worst || std::isnan(d)) worst = d, worst_at = j;
    }
    const double err = std::sqrt(diff) / std::max(std::sqrt(norm), 1.0);
    if (!(err <= options.tol))
      return ::testing::AssertionFailure() << "gradcheck: input " << i << " " << shape_str(inputs[i].shape())
                                           << ": relative error " << err << " > " << options.tol
                                           << (grad.defined() ? "" : " (no gradient reached it)") << "; worst element "
                                           << worst_at << ": analytic " << analytic[worst_at] << " vs numeric "
                                           << numeric[worst_at];
  }
  return ::testing::AssertionSuccess();
}

/// The inputs' absolute values as fresh f64 leaves (integer inputs unchanged).
inline std::vector<Tensor> absolute_leaves(const std::vector<Tensor>& inputs) {
  // Leaves only where the reference differentiates, so both graphs have the same shape.
  std::vector<Tensor> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !is_floating(inputs[i].dtype())) {
      out[i] = inputs[i];
      continue;
    }
    std::vector<double> v = inputs[i].to_vector();
    for (double& x : v) x = std::abs(x);
    out[i] = Tensor::from_vector(v, inputs[i].shape(), DType::F64);
    if (inputs[i].requires_grad()) out[i].requires_grad_();
  }
  return out;
}

/// Runs f on `inputs` (f64 CPU masters for floating inputs; integer inputs as they are) moved to
/// (device, dtype), and on the CPU in f64 over the very same rounded values. Compares the outputs
/// and, when the output is differentiable, the gradient of every floating input for a random
/// upstream gradient. Gradients must also keep their input's dtype and device. `wrt`, when
/// given, marks the floating inputs to differentiate; the others are converted but stay constants.
///
/// A result passes when ‖r − r_ref‖ <= tol · ‖r_ref‖ + u · ‖r_abs‖, u the dtype's unit roundoff
/// and r_abs the same result computed from |inputs| and |upstream|: a sum of K rounded terms
/// (the gradient of a broadcast operand, say) is off by about u · Σ|term| however much the
/// terms cancel, so its error is measured against the terms' size, not the sum's.
inline ::testing::AssertionResult matches_f64_reference(const TensorFn& f, const std::vector<Tensor>& inputs,
                                                        Device device, DType dtype, Generator& gen, double fwd_tol,
                                                        double grad_tol, const std::vector<bool>& wrt = {}) {
  const size_t n = inputs.size();
  std::vector<Tensor> on_device(n), reference(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined()) continue;
    if (is_floating(x.dtype())) {
      on_device[i] = fresh_copy(x, dtype, device);
      reference[i] = fresh_copy(on_device[i], DType::F64, kCPU);  // the rounded values, exactly
      if (wrt.empty() || wrt[i]) {
        on_device[i].requires_grad_();
        reference[i].requires_grad_();
      }
    } else {
      on_device[i] = fresh_copy(x, x.dtype(), device);
      reference[i] = x;
    }
  }
  const std::vector<Tensor> absolute = absolute_leaves(reference);
  const double u = unit_roundoff(dtype);
  const Tensor y = f(on_device);
  const Tensor y_ref = f(reference);
  const Tensor y_abs = f(absolute);
  if (!y.defined() || y.device() != device)
    return ::testing::AssertionFailure() << "output is not a tensor on " << device.str();
  if (auto r = all_close(y, y_ref, fwd_tol, u * norm_of(y_abs.to_vector())); !r)
    return ::testing::AssertionFailure() << "forward: " << r.message();
  if (!y_ref.requires_grad()) return ::testing::AssertionSuccess();
  if (!y.requires_grad()) return ::testing::AssertionFailure() << "output on " << device.str() << " has no history";
  const Tensor w = random_tensor(y_ref.shape(), DType::F64, kCPU, gen);
  const Tensor w_device = fresh_copy(w, y.dtype(), device);
  const Tensor w_ref = fresh_copy(w_device, DType::F64, kCPU);
  y.backward(w_device);
  y_ref.backward(w_ref);
  if (y_abs.requires_grad()) {
    std::vector<double> wa = w_ref.to_vector();
    for (double& x : wa) x = std::abs(x);
    y_abs.backward(Tensor::from_vector(wa, w_ref.shape(), DType::F64));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!on_device[i].defined() || !on_device[i].requires_grad()) continue;
    const Tensor g = on_device[i].grad(), g_ref = reference[i].grad(), g_abs = absolute[i].grad();
    if (g.defined() != g_ref.defined())
      return ::testing::AssertionFailure() << "gradient of input " << i << (g.defined() ? " is" : " is not")
                                           << " defined on " << device.str() << " but"
                                           << (g_ref.defined() ? " is" : " is not") << " in the reference";
    if (!g.defined()) continue;
    if (g.dtype() != dtype || g.device() != device)
      return ::testing::AssertionFailure() << "gradient of input " << i << " is " << dtype_name(g.dtype()) << " on "
                                           << g.device().str() << ", expected " << dtype_name(dtype) << " on "
                                           << device.str();
    const double allowance = g_abs.defined() ? u * norm_of(g_abs.to_vector()) : 0.0;
    if (auto r = all_close(g, g_ref, grad_tol, allowance); !r)
      return ::testing::AssertionFailure() << "gradient of input " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

// ---- parametrizations

/// Where and in which dtype a primitive runs; each is compared with the CPU f64 reference.
struct DeviceDType {
  Device device;
  DType dtype;
};

inline std::vector<DeviceDType> device_dtypes() {
  return {{kCPU, DType::F32}, {kCPU, DType::BF16}, {kCUDA, DType::F32}, {kCUDA, DType::BF16}, {kCUDA, DType::F64}};
}

inline std::string device_dtype_name(const DeviceDType& p) {
  return std::string(p.device.is_cuda() ? "cuda" : "cpu") + "_" + dtype_name(p.dtype);
}
inline void PrintTo(const DeviceDType& p, std::ostream* out) { *out << device_dtype_name(p); }

/// Device × KernelMode: the four ways a fused op can run (on the CPU both modes run the twin,
/// which the CPU parameters confirm).
struct DeviceMode {
  Device device;
  KernelMode mode;
};

inline std::vector<DeviceMode> device_modes() {
  return {{kCPU, KernelMode::Fused}, {kCPU, KernelMode::Unfused}, {kCUDA, KernelMode::Fused}, {kCUDA, KernelMode::Unfused}};
}

inline std::string device_mode_name(const DeviceMode& p) {
  return std::string(p.device.is_cuda() ? "cuda" : "cpu") + "_" + kernel_mode_name(p.mode);
}
inline void PrintTo(const DeviceMode& p, std::ostream* out) { *out << device_mode_name(p); }

/// Fixture for DeviceMode-parametrized tests: skips without a GPU and holds the kernel mode
/// for the test's duration.
class DeviceModeTest : public ::testing::TestWithParam<DeviceMode> {
 protected:
  void SetUp() override {
    FT_SKIP_UNLESS_AVAILABLE(GetParam().device);
    mode_.emplace(GetParam().mode);
  }
  void TearDown() override { mode_.reset(); }
  Device device() const { return GetParam().device; }

 private:
  std::optional<KernelModeGuard> mode_;
};

/// Makes a gtest-safe name (letters, digits, underscores).
inline std::string sanitize(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

}  // namespace ft::test
