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
//   - clip_grad_norm in every mode.
// The graph-captured step and the multi_tensor primitives are in multi_tensor_cuda_test.cpp.
#include <gtest/gtest.h>

#include "tests/optim/fused_optim_util.h"

namespace ft {
namespace {

using namespace ft::test;

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

// The step state counts the steps skipped in a row (the trainer stops a run on it): back to 0
// at every applied step; set_step_count (a resume) starts it over.
TEST_P(NonfiniteSkipTest, SkipRunCountsStepsSkippedInARow) {
  Generator gen = test_generator();
  const std::vector<Tensor> params = random_params(shapes(), ParamKind::Mixed, device(), gen);
  AdamW opt(params, AdamW::Options{.lr = 1e-2, .policy = {.max_grad_norm = 1.0}});
  const std::vector<bool> bad = {false, true, true, true, false, true, true};
  const std::vector<double> runs = {0, 1, 2, 3, 0, 1, 2};
  for (size_t i = 0; i < bad.size(); ++i) {
    if (bad[i]) set_grads_with_one_bad_element(gen, params);
    else set_random_grads(gen, params);
    opt.step();
    EXPECT_EQ(opt.step_state().skip_run.item(), runs[i]) << "after step " << i + 1;
  }
  EXPECT_EQ(opt.skipped_steps(), 5);
  opt.set_step_count(7);
  EXPECT_EQ(opt.step_state().skip_run.item(), 0.0);
}

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
