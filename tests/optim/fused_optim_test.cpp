// The multi-tensor fused optimizer (optim/multi_tensor.h) against its per-tensor twin, and the
// device-side step (settle_step: norm, clip factor, skip flag, counts) that both read.
//
// Parameter lists hold more than 110 tensors, more than a launch's table takes at depth 4 and 5,
// so one list needs several launches. Their sizes sit on both sides of multiples of the kernels'
// 4096-element unit (65535, 65536, 65537, ...), with tiny tails and a few large tensors, one of
// 21M elements, so a block's share of a launch starts, ends and crosses tensor boundaries. Shapes are 1-D and
// 2-D, so AdamW's default rule (decay only dim >= 2) decays some of them. Covered:
//   - AdamW and SGD, fused vs twin on CUDA over many steps with a changing learning rate,
//     for f32 parameters (their own master), bf16 parameters (f32 master) and a mix of both;
//   - clipping inside the update, and last_grad_norm() as the norm before clipping;
//   - a NaN or Inf gradient skips the whole step bit for bit, on the CPU and on CUDA in both
//     modes, and the next step is the one an optimizer that never saw the bad step takes;
//   - a fused step captured in a CUDA graph and replayed, with set_lr and new gradients
//     between replays, is bit-identical to eager steps;
//   - multi_tensor::settle_step, scale and zero directly, and clip_grad_norm in every mode.
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
#include "lib/ops/elementwise.h"
#include "lib/runtime.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/multi_tensor.h"
#include "optim/sgd.h"
#include "tests/lib/test_util.h"

#if FT_WITH_CUDA
#include "lib/cuda/runtime.h"
#endif

namespace ft {
namespace {

using namespace ft::test;

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

std::string param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::F32: return "f32";
    case ParamKind::BF16: return "bf16";
    case ParamKind::Mixed: return "mixed";
  }
  return "?";
}

void PrintTo(ParamKind kind, std::ostream* out) { *out << param_kind_name(kind); }

DType dtype_of(ParamKind kind, size_t index) {
  switch (kind) {
    case ParamKind::F32: return DType::F32;
    case ParamKind::BF16: return DType::BF16;
    case ParamKind::Mixed: return index % 3 == 1 ? DType::BF16 : DType::F32;
  }
  return DType::F32;
}

/// `count` shapes around multiples of the kernels' 4096-element unit (see the file comment);
/// 120 of them are ~5M elements, ~26M with the long tensor.
std::vector<Shape> chunk_straddling_shapes(size_t count, bool with_long_tensor = false) {
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
std::vector<Shape> small_shapes() { return {{4, 3}, {3}, {1}, {2, 5}, {7}, {1, 1}}; }

/// Uniform values in [-1, 1), drawn on the device: Tensor::randn draws on the host, which made
/// these tests spend most of their time generating ~30M numbers per step.
Tensor random_values(const Shape& shape, Generator& gen, DType dtype, Device device) {
  return cast(affine(Tensor::rand(shape, gen, DType::F32, device), 2.0, -1.0), dtype);
}

/// Leaves with uniform values in [-1, 1), dtype by `kind`, on `device`.
std::vector<Tensor> random_params(const std::vector<Shape>& shapes, ParamKind kind, Device device, Generator& gen) {
  std::vector<Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = random_values(shapes[i], gen, dtype_of(kind, i), device);
    p.requires_grad_();
    params.push_back(p);
  }
  return params;
}

/// New leaves with the same values (own storage), so two optimizers start from one point.
std::vector<Tensor> clone_params(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(fresh_leaf(p, p.dtype(), p.device()));
  return out;
}

/// Fresh standard normal gradients in each parameter's dtype; every set in `twins` gets copies of
/// the same values (its own storage, so no optimizer can see another's writes).
void set_random_grads(Generator& gen, const std::vector<Tensor>& params,
                      const std::vector<std::vector<Tensor>>& twins = {}) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = random_values(params[i].shape(), gen, params[i].dtype(), params[i].device());
    params[i].set_grad(g);
    for (const std::vector<Tensor>& twin : twins) twin[i].set_grad(fresh_copy(g, g.dtype(), g.device()));
  }
}

/// Overwrites element `index` of t (flat order) with `value`, in place.
void poke(const Tensor& t, int64_t index, double value) {
  t.reshape({t.numel()}).narrow(0, index, 1).copy_(Tensor::full({1}, value, t.dtype(), t.device()));
}

/// The gradients' global L2 norm, summed in f64 on the host.
double host_grad_norm(const std::vector<Tensor>& params) {
  double sum = 0.0;
  for (const Tensor& p : params)
    for (double x : p.grad().to_vector()) sum += x * x;
  return std::sqrt(sum);
}

// ---- comparisons

double rms(const std::vector<double>& v) { return v.empty() ? 0.0 : norm_of(v) / std::sqrt(double(v.size())); }

/// Every element within tol · (|expected_i| + rms(expected)) + spacing · max(|actual_i|,
/// |expected_i|) of expected: relative for ordinary values, relative to the tensor's typical size
/// where a value is near zero, plus `spacing` for values rounded to a coarse dtype. Element by
/// element, so that one element a kernel skipped at a chunk edge cannot hide in a norm over millions.
::testing::AssertionResult elementwise_close(const Tensor& actual, const Tensor& expected, double tol,
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
::testing::AssertionResult is_rounded_master(const Tensor& param, const Tensor& master) {
  const Tensor rounded = Tensor::from_vector(master.to_vector(), master.shape(), DType::BF16);
  return all_equal(param, rounded);
}

/// Raw bytes of tensors by name, read back to the host: what "untouched, bit for bit" compares.
using Snapshot = std::map<std::string, std::vector<uint8_t>>;

std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const Tensor host = t.to(kCPU);
  const auto* begin = static_cast<const uint8_t*>(host.data_ptr());
  return {begin, begin + host.nbytes()};
}

/// The parameters ("param.<i>") and, for AdamW, every per-parameter state tensor ("<i>.m", ...).
Snapshot snapshot(const std::vector<Tensor>& params, const AdamW* adamw = nullptr) {
  Snapshot out;
  for (size_t i = 0; i < params.size(); ++i) out["param." + std::to_string(i)] = raw_bytes(params[i]);
  if (adamw)
    for (const auto& [name, t] : adamw->state())
      if (name.find('.') != std::string::npos) out[name] = raw_bytes(t);  // not the step counts
  return out;
}

::testing::AssertionResult same_bits(const Snapshot& actual, const Snapshot& expected) {
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
void expect_adamw_states_close(const AdamW& fused, const std::vector<Tensor>& fused_params, const AdamW& twin,
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

std::string kind_test_name(const ::testing::TestParamInfo<ParamKind>& info) { return param_kind_name(info.param); }

const auto kAllKinds = ::testing::Values(ParamKind::F32, ParamKind::BF16, ParamKind::Mixed);

/// A warmup-then-cosine schedule, so every step of a run uses a different learning rate.
LRSchedule changing_schedule(int64_t steps, double max_lr) {
  return LRSchedule{.kind = LRSchedule::Kind::WarmupCosine, .max_lr = max_lr, .warmup_steps = steps / 4,
                    .total_steps = steps, .min_lr = max_lr / 10};
}

// ---- AdamW: fused vs twin

class FusedAdamWTest : public CudaParamKindTest {};

TEST_P(FusedAdamWTest, MatchesTwinOverStepsAcrossChunkBoundaries) {
  Generator gen = test_generator();
  const std::vector<Tensor> fused_params = random_params(chunk_straddling_shapes(120, /*with_long_tensor=*/true), GetParam(), kCUDA, gen);
  const std::vector<Tensor> twin_params = clone_params(fused_params);
  const AdamW::Options options{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  AdamW fused(fused_params, options), twin(twin_params, options);
  const int64_t steps = steps_for_this_run(20, 3);
  const LRSchedule schedule = changing_schedule(steps, 1e-2);
  for (int64_t step = 0; step < steps; ++step) {
    set_random_grads(gen, fused_params, {twin_params});
    fused.set_lr(schedule.at(step));
    twin.set_lr(schedule.at(step));
    {
      KernelModeGuard mode(KernelMode::Fused);
      fused.step();
    }
    {
      KernelModeGuard mode(KernelMode::Unfused);
      twin.step();
    }
  }
  EXPECT_EQ(fused.applied_steps(), steps);
  EXPECT_EQ(twin.applied_steps(), steps);
  expect_adamw_states_close(fused, fused_params, twin, twin_params);
}

// Clipping scales the gradients inside the update. Adam's step barely depends on a uniform
// scale, so the first moment (m = (1 − β1)·clip·g after one step) is where the factor shows.
TEST_P(FusedAdamWTest, ClipsInsideTheUpdateAndReportsTheNormBeforeClipping) {
  Generator gen = test_generator();
  const std::vector<Tensor> fused_params = random_params(chunk_straddling_shapes(120), GetParam(), kCUDA, gen);
  const std::vector<Tensor> twin_params = clone_params(fused_params);
  const double max_grad_norm = 0.1;  // the norm of ~5M values uniform in [-1, 1) is ~1300
  const AdamW::Options options{.lr = 1e-2, .weight_decay = 0.1, .policy = {.max_grad_norm = max_grad_norm}};
  AdamW fused(fused_params, options), twin(twin_params, options);
  struct Run {
    AdamW& opt;
    const std::vector<Tensor>& params;
    KernelMode mode;
  };
  for (int64_t step = 0; step < steps_for_this_run(4, 2); ++step) {
    set_random_grads(gen, fused_params, {twin_params});
    const double exact_norm = host_grad_norm(fused_params);
    for (const Run& run : {Run{fused, fused_params, KernelMode::Fused}, Run{twin, twin_params, KernelMode::Unfused}}) {
      SCOPED_TRACE(std::string(kernel_mode_name(run.mode)) + " step " + std::to_string(step));
      KernelModeGuard mode(run.mode);
      const double norm_before = grad_norm(run.params).item();  // the gradients are not clipped yet
      std::vector<Tensor> grads_before;  // for the first moment after the first step
      if (step == 0)
        for (const Tensor& p : run.params) grads_before.push_back(fresh_copy(p.grad(), DType::F64, kCPU));
      run.opt.step();
      ASSERT_TRUE(run.opt.last_grad_norm().defined());
      const double reported = run.opt.last_grad_norm().item();
      EXPECT_NEAR(reported, norm_before, kNormTolerance * norm_before);
      EXPECT_NEAR(reported, exact_norm, kNormTolerance * exact_norm);
      if (step > 0) continue;
      const double clip = std::min(1.0, max_grad_norm / (reported + 1e-6));
      ASSERT_LT(clip, 1e-3) << "the test means to clip";
      const std::map<std::string, Tensor> state = run.opt.state();
      for (size_t i = 0; i < run.params.size(); ++i) {
        std::vector<double> expected_m = grads_before[i].to_vector();
        for (double& x : expected_m) x *= (1 - options.beta1) * clip;
        // A few f32 roundings, and 1 − β1 taken from β1 = 0.9f is 0.1 + 2.4e-7: inside 2e-6.
        EXPECT_TRUE(elementwise_close(state.at(std::to_string(i) + ".m"),
                                      Tensor::from_vector(expected_m, run.params[i].shape(), DType::F64), 2e-6))
            << "m of parameter " << i;
      }
    }
  }
  expect_adamw_states_close(fused, fused_params, twin, twin_params, kClippedStateTolerance);
}

INSTANTIATE_TEST_SUITE_P(Kinds, FusedAdamWTest, kAllKinds, kind_test_name);

// ---- SGD: fused vs twin

class FusedSGDTest : public CudaParamKindTest {};

TEST_P(FusedSGDTest, MomentumAndWeightDecayMatchTwinAcrossChunkBoundaries) {
  Generator gen = test_generator();
  const std::vector<Tensor> fused_params = random_params(chunk_straddling_shapes(120), GetParam(), kCUDA, gen);
  const std::vector<Tensor> twin_params = clone_params(fused_params);
  const SGD::Options options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01};
  SGD fused(fused_params, options), twin(twin_params, options);
  const int64_t steps = steps_for_this_run(10, 3);
  const LRSchedule schedule = changing_schedule(steps, 0.05);
  for (int64_t step = 0; step < steps; ++step) {
    set_random_grads(gen, fused_params, {twin_params});
    fused.set_lr(schedule.at(step));
    twin.set_lr(schedule.at(step));
    {
      KernelModeGuard mode(KernelMode::Fused);
      fused.step();
    }
    {
      KernelModeGuard mode(KernelMode::Unfused);
      twin.step();
    }
  }
  // SGD's masters and buffers are private, so the parameters carry the comparison: f32 ones are
  // the masters (kStateTolerance, as for AdamW), bf16 ones are masters rounded once.
  for (size_t i = 0; i < fused_params.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i) + " " + shape_str(fused_params[i].shape()));
    const double spacing = fused_params[i].dtype() == DType::BF16 ? kBf16Spacing : 0.0;
    EXPECT_TRUE(elementwise_close(fused_params[i], twin_params[i], kStateTolerance, spacing));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, FusedSGDTest, kAllKinds, kind_test_name);

// ---- non-finite gradients skip the step

struct SkipCase {
  DeviceMode where;
  double bad_value;
};

std::vector<SkipCase> skip_cases() {
  std::vector<SkipCase> cases;
  for (const DeviceMode& dm : device_modes())
    for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()})
      cases.push_back({dm, bad});
  return cases;
}

std::string skip_case_label(const SkipCase& c) {
  return device_mode_name(c.where) + (std::isnan(c.bad_value) ? "_nan" : "_inf");
}
void PrintTo(const SkipCase& c, std::ostream* out) { *out << skip_case_label(c); }
std::string skip_case_name(const ::testing::TestParamInfo<SkipCase>& info) { return skip_case_label(info.param); }

class NonfiniteSkipTest : public ::testing::TestWithParam<SkipCase> {
 protected:
  void SetUp() override {
    FT_SKIP_UNLESS_AVAILABLE(device());
    mode_.emplace(GetParam().where.mode);
  }
  void TearDown() override { mode_.reset(); }
  Device device() const { return GetParam().where.device; }
  double bad_value() const { return GetParam().bad_value; }
  /// The big chunked list on CUDA; a few small tensors on the CPU, where only the twin runs.
  std::vector<Shape> shapes() const { return device().is_cuda() ? chunk_straddling_shapes(120) : small_shapes(); }
  /// Fresh gradients with one bad element: the last one of a tensor two thirds down the list,
  /// in the tail of its last chunk (where a kernel that drops a partial chunk would miss it).
  void set_grads_with_one_bad_element(Generator& gen, const std::vector<Tensor>& params) const {
    set_random_grads(gen, params);
    const Tensor& g = params[params.size() * 2 / 3].grad();
    poke(g, g.numel() - 1, bad_value());
  }

 private:
  std::optional<KernelModeGuard> mode_;
};

// Clipping is on as well: the bad norm also reaches the clip factor (0 for an infinite norm),
// and a skipped step must let none of it (nor a NaN · 0) reach any value.
TEST_P(NonfiniteSkipTest, AdamWLeavesEverythingUntouchedThenResumes) {
  Generator gen = test_generator();
  const std::vector<Tensor> params = random_params(shapes(), ParamKind::Mixed, device(), gen);
  const std::vector<Tensor> reference_params = clone_params(params);
  const AdamW::Options options{.lr = 1e-2, .weight_decay = 0.1, .policy = {.max_grad_norm = 1.0}};
  AdamW opt(params, options), reference(reference_params, options);

  // A finite step for both first, so the moments and the bias correction have history.
  set_random_grads(gen, params, {reference_params});
  opt.step();
  reference.step();

  set_grads_with_one_bad_element(gen, params);
  const Snapshot before = snapshot(params, &opt);
  opt.step();
  EXPECT_TRUE(same_bits(snapshot(params, &opt), before));
  EXPECT_EQ(opt.skipped_steps(), 1);
  EXPECT_EQ(opt.applied_steps(), 1);
  EXPECT_EQ(opt.step_count(), 2);
  ASSERT_TRUE(opt.last_grad_norm().defined());
  EXPECT_FALSE(std::isfinite(opt.last_grad_norm().item()));

  // The next finite step is the second applied one, as for the reference that never saw the bad one.
  set_random_grads(gen, params, {reference_params});
  opt.set_lr(2e-2);
  reference.set_lr(2e-2);
  opt.step();
  reference.step();
  EXPECT_EQ(opt.applied_steps(), 2);
  EXPECT_EQ(opt.skipped_steps(), 1);
  EXPECT_EQ(reference.skipped_steps(), 0);
  EXPECT_TRUE(same_bits(snapshot(params, &opt), snapshot(reference_params, &reference)));
}

TEST_P(NonfiniteSkipTest, SGDLeavesEverythingUntouchedThenResumes) {
  Generator gen = test_generator();
  const std::vector<Tensor> params = random_params(shapes(), ParamKind::Mixed, device(), gen);
  const std::vector<Tensor> reference_params = clone_params(params);
  const SGD::Options options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .policy = {.max_grad_norm = 1.0}};
  SGD opt(params, options), reference(reference_params, options);

  set_random_grads(gen, params, {reference_params});
  opt.step();
  reference.step();

  set_grads_with_one_bad_element(gen, params);
  const Snapshot before = snapshot(params);
  opt.step();
  EXPECT_TRUE(same_bits(snapshot(params), before));
  EXPECT_EQ(opt.skipped_steps(), 1);
  EXPECT_EQ(opt.applied_steps(), 1);

  // The momentum buffers are private; a buffer the bad step had touched would show here.
  set_random_grads(gen, params, {reference_params});
  opt.step();
  reference.step();
  EXPECT_EQ(opt.applied_steps(), 2);
  EXPECT_TRUE(same_bits(snapshot(params), snapshot(reference_params)));
}

INSTANTIATE_TEST_SUITE_P(Cases, NonfiniteSkipTest, ::testing::ValuesIn(skip_cases()), skip_case_name);

// ---- CUDA graph capture and replay

#if FT_WITH_CUDA
/// `work` captured once into a CUDA graph on the compute stream, then replayed on it.
class CapturedWork {
 public:
  explicit CapturedWork(const std::function<void()>& work) {
    FT_CUDA_CHECK(cudaStreamBeginCapture(cuda::stream(), cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (...) {
      // Leave the stream out of capture mode, so that the tests after this one can run.
      cudaStreamEndCapture(cuda::stream(), &graph_);
      release();
      cudaGetLastError();
      throw;
    }
    FT_CUDA_CHECK(cudaStreamEndCapture(cuda::stream(), &graph_));
    if (cudaGraphInstantiate(&exec_, graph_, 0) != cudaSuccess) {
      release();
      FT_CHECK(false, "CapturedWork: cudaGraphInstantiate failed");
    }
  }
  ~CapturedWork() { release(); }
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;
  void replay() const { FT_CUDA_CHECK(cudaGraphLaunch(exec_, cuda::stream())); }

 private:
  void release() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};
#endif

class CapturedAdamWTest : public CudaParamKindTest {};

// Setup A steps eagerly; setup B captures one step after the same eager warm-up and replays it.
// Between steps both get new gradients copied into the gradient tensors they already hold (the
// graph keeps their addresses) and a new learning rate from set_lr, outside the capture. Both
// run the same kernels on the same values, so they must agree bit for bit.
TEST_P(CapturedAdamWTest, ReplayedStepsMatchEagerStepsExactly) {
#if FT_WITH_CUDA
  KernelModeGuard mode(KernelMode::Fused);
  Generator gen = test_generator();
  const std::vector<Tensor> eager_params = random_params(chunk_straddling_shapes(120), GetParam(), kCUDA, gen);
  const std::vector<Tensor> graph_params = clone_params(eager_params);
  const AdamW::Options options{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1,
                               .policy = {.max_grad_norm = 1.0}};
  AdamW eager(eager_params, options), graphed(graph_params, options);
  const int64_t replays = steps_for_this_run(5, 2);
  const LRSchedule schedule = changing_schedule(replays + 1, 1e-2);

  set_random_grads(gen, eager_params, {graph_params});  // these tensors stay the gradients
  eager.set_lr(schedule.at(0));
  graphed.set_lr(schedule.at(0));
  eager.step();
  graphed.step();  // the warm-up: whatever a first step sets up happens outside the capture
  CapturedWork captured_step([&] { graphed.step(); });

  for (int64_t step = 1; step <= replays; ++step) {
    for (size_t i = 0; i < eager_params.size(); ++i) {
      const Tensor g = Tensor::randn(eager_params[i].shape(), gen, eager_params[i].dtype(), kCUDA);
      eager_params[i].grad().copy_(g);
      graph_params[i].grad().copy_(g);
    }
    eager.set_lr(schedule.at(step));
    eager.step();
    graphed.set_lr(schedule.at(step));
    captured_step.replay();
  }
  cuda::check_device_errors();
  EXPECT_EQ(eager.applied_steps(), replays + 1);
  EXPECT_EQ(graphed.applied_steps(), replays + 1);
  EXPECT_TRUE(same_bits(snapshot(graph_params, &graphed), snapshot(eager_params, &eager)));
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

INSTANTIATE_TEST_SUITE_P(Kinds, CapturedAdamWTest, kAllKinds, kind_test_name);

// ---- multi_tensor primitives

/// One-element f32 step state on the GPU; -1 marks values settle_step has not written.
StepState sentinel_step_state() {
  auto scalar = [](double v) { return Tensor::full({1}, v, DType::F32, kCUDA); };
  return StepState{.lr = scalar(1e-3), .applied = scalar(0), .skipped = scalar(0), .grad_norm = scalar(-1),
                   .keep = scalar(-1), .clip = scalar(-1)};
}

/// Random tensors of the chunk-straddling shapes, every third one bf16, on the GPU.
std::vector<Tensor> random_tensor_list(Generator& gen) {
  std::vector<Tensor> tensors;
  const std::vector<Shape> shapes = chunk_straddling_shapes(120);
  for (size_t i = 0; i < shapes.size(); ++i)
    tensors.push_back(Tensor::randn(shapes[i], gen, dtype_of(ParamKind::Mixed, i), kCUDA));
  return tensors;
}

TEST(MultiTensorTest, FusedSupportedOnlyForCudaF32AndBf16WithF32State) {
  Generator gen = test_generator();
  EXPECT_FALSE(multi_tensor::fused_supported({Tensor::randn({4}, gen, DType::F32, kCPU)}));
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (the CPU case passed)";
  const Tensor f32 = Tensor::randn({4}, gen, DType::F32, kCUDA), bf16 = Tensor::randn({3}, gen, DType::BF16, kCUDA);
  EXPECT_TRUE(multi_tensor::fused_supported({f32, bf16, Tensor()}));
  EXPECT_FALSE(multi_tensor::fused_supported({f32, bf16}, DType::F64));
  EXPECT_FALSE(multi_tensor::fused_supported({f32, Tensor::randn({4}, gen, DType::F64, kCUDA)}));
  EXPECT_FALSE(multi_tensor::fused_supported({f32, Tensor::randn({4}, gen, DType::F32, kCPU)}));
}

TEST(MultiTensorTest, SettleStepNormMatchesTwinAndIsDeterministic) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen = test_generator();
  const std::vector<Tensor> grads = random_tensor_list(gen);
  std::vector<Tensor> params;  // leaves holding `grads`, for the twin grad_norm
  for (const Tensor& g : grads) {
    Tensor p = Tensor::randn(g.shape(), gen, g.dtype(), kCUDA);
    p.requires_grad_();
    p.set_grad(g);
    params.push_back(p);
  }
  double twin_norm = 0;
  {
    KernelModeGuard mode(KernelMode::Unfused);
    twin_norm = grad_norm(params).item();
  }
  const double exact_norm = host_grad_norm(params);
  const double max_grad_norm = 0.5;

  const StepState state = sentinel_step_state();
  multi_tensor::settle_step(grads, state, StepPolicy{.max_grad_norm = max_grad_norm});
  const double norm = state.grad_norm.item();
  EXPECT_NEAR(norm, twin_norm, kNormTolerance * twin_norm);
  EXPECT_NEAR(norm, exact_norm, kNormTolerance * exact_norm);
  EXPECT_NEAR(state.clip.item(), max_grad_norm / (norm + 1e-6), 1e-6 * max_grad_norm / norm);
  EXPECT_EQ(state.keep.item(), 1.0);
  EXPECT_EQ(state.applied.item(), 1.0);
  EXPECT_EQ(state.skipped.item(), 0.0);
  EXPECT_EQ(state.lr.item(), static_cast<double>(1e-3f)) << "settle_step must not write the learning rate";

  // Chunk sums are added in a fixed order: the same bits every time.
  multi_tensor::settle_step(grads, state, StepPolicy{.max_grad_norm = max_grad_norm});
  EXPECT_EQ(state.grad_norm.item(), norm);
  EXPECT_EQ(state.applied.item(), 2.0);

  // Without clipping the factor is exactly 1.
  multi_tensor::settle_step(grads, state, StepPolicy{});
  EXPECT_EQ(state.clip.item(), 1.0);
}

TEST(MultiTensorTest, SettleStepFlagsNonfiniteNorms) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen = test_generator();
  const std::vector<Tensor> grads = random_tensor_list(gen);
  poke(grads[grads.size() / 2], grads[grads.size() / 2].numel() / 2, std::numeric_limits<double>::quiet_NaN());

  const StepState skipping = sentinel_step_state();
  multi_tensor::settle_step(grads, skipping, StepPolicy{.max_grad_norm = 1.0});
  EXPECT_TRUE(std::isnan(skipping.grad_norm.item()));
  EXPECT_EQ(skipping.keep.item(), 0.0);
  EXPECT_EQ(skipping.applied.item(), 0.0);
  EXPECT_EQ(skipping.skipped.item(), 1.0);

  const StepState keeping = sentinel_step_state();
  multi_tensor::settle_step(grads, keeping, StepPolicy{.skip_nonfinite = false});
  EXPECT_EQ(keeping.keep.item(), 1.0);
  EXPECT_EQ(keeping.applied.item(), 1.0);
  EXPECT_EQ(keeping.skipped.item(), 0.0);
}

TEST(MultiTensorTest, SettleStepWithoutTensorsKeepsTheStepUnclipped) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const StepState state = sentinel_step_state();
  multi_tensor::settle_step({}, state, StepPolicy{.max_grad_norm = 1.0});
  EXPECT_EQ(state.keep.item(), 1.0);
  EXPECT_EQ(state.clip.item(), 1.0);
  EXPECT_EQ(state.applied.item(), 1.0);
  EXPECT_EQ(state.skipped.item(), 0.0);
}

// scale and zero touch the even-indexed tensors only: the odd ones, allocated between them, must
// keep their bits, which catches a chunk that writes past its tensor's end.
TEST(MultiTensorTest, ScaleMultipliesEveryElementOfTheListOnly) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen = test_generator();
  const std::vector<Tensor> tensors = random_tensor_list(gen);
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < tensors.size(); i += 2) scaled.push_back(tensors[i]);
  std::vector<std::vector<uint8_t>> before;
  std::vector<std::vector<double>> values;
  for (const Tensor& t : tensors) {
    before.push_back(raw_bytes(t));
    values.push_back(t.to_vector());
  }
  const float factor = 0.37f;
  multi_tensor::scale(scaled, Tensor::full({1}, factor, DType::F32, kCUDA));
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i) + " " + shape_str(tensors[i].shape()));
    if (i % 2) {
      EXPECT_EQ(raw_bytes(tensors[i]), before[i]) << "not in the list, yet written";
      continue;
    }
    // The kernel multiplies in f32 and rounds once to the storage dtype. The product of two f32
    // values is exact in f64, so rounding it to f32 here gives the f32 product, and bf16 follows.
    std::vector<double> product = values[i];
    for (double& x : product) x *= static_cast<double>(factor);
    Tensor expected = Tensor::from_vector(product, tensors[i].shape(), DType::F32);
    if (tensors[i].dtype() == DType::BF16) expected = expected.to(DType::BF16);
    EXPECT_TRUE(all_equal(tensors[i], expected));
  }
}

TEST(MultiTensorTest, ZeroClearsEveryElementOfTheListOnly) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen = test_generator();
  const std::vector<Tensor> tensors = random_tensor_list(gen);
  std::vector<Tensor> zeroed;
  for (size_t i = 0; i < tensors.size(); i += 2) zeroed.push_back(tensors[i]);
  std::vector<std::vector<uint8_t>> before;
  for (const Tensor& t : tensors) before.push_back(raw_bytes(t));
  multi_tensor::zero(zeroed);
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i) + " " + shape_str(tensors[i].shape()));
    if (i % 2) {
      EXPECT_EQ(raw_bytes(tensors[i]), before[i]) << "not in the list, yet written";
      continue;
    }
    // +0.0 in every element: all bytes zero, in either dtype.
    const std::vector<uint8_t> bytes = raw_bytes(tensors[i]);
    size_t nonzero = 0;
    for (uint8_t b : bytes) nonzero += b != 0;
    EXPECT_EQ(nonzero, 0u);
  }
}

// ---- clip_grad_norm, in every mode (the CPU cases run in CI)

class ClipGradNormTest : public DeviceModeTest {};

TEST_P(ClipGradNormTest, ScalesToMaxNormAndReturnsTheNormBefore) {
  Generator gen = test_generator();
  const std::vector<Shape> shapes = device().is_cuda() ? chunk_straddling_shapes(120) : small_shapes();
  const std::vector<Tensor> params = random_params(shapes, ParamKind::F32, device(), gen);
  set_random_grads(gen, params);
  std::vector<Tensor> grads_before;
  for (const Tensor& p : params) grads_before.push_back(fresh_copy(p.grad(), DType::F64, kCPU));
  const double exact_norm = host_grad_norm(params);

  // Above the norm: the factor is exactly 1 and the gradients keep their bits.
  const double loose = clip_grad_norm(params, 4 * exact_norm).item();
  EXPECT_NEAR(loose, exact_norm, kNormTolerance * exact_norm);
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(all_equal(params[i].grad(), grads_before[i])) << i;

  const double max_norm = exact_norm / 4;
  const double returned = clip_grad_norm(params, max_norm).item();
  EXPECT_NEAR(returned, exact_norm, kNormTolerance * exact_norm);
  const double factor = max_norm / (returned + 1e-6);
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<double> expected = grads_before[i].to_vector();
    for (double& x : expected) x *= factor;
    EXPECT_TRUE(elementwise_close(params[i].grad(), Tensor::from_vector(expected, params[i].shape(), DType::F64),
                                  kNormTolerance))
        << i;
  }
  EXPECT_NEAR(host_grad_norm(params), max_norm, kNormTolerance * max_norm);
}

INSTANTIATE_TEST_SUITE_P(Modes, ClipGradNormTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

}  // namespace
}  // namespace ft
