// bias_act (act(x + bias) for every Activation) and swiglu (silu(a)·b, separate and split
// forms). On the CPU each must be its composite twin and match a loop written here, with a
// gradient check in f64; on CUDA, in both kernel modes and in f32 and bf16, each must match the
// CPU f64 reference in forward and in every gradient, and the fused path must agree with the
// twin on the same inputs. Dimension letters: N rows, C columns, H the SwiGLU half width.
#include <cmath>
#include <string>
#include <vector>

#include "lib/ops/bias_act/bias_act.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

const Activation kActivations[] = {Activation::None, Activation::ReLU, Activation::GELU, Activation::GELUErf,
                                   Activation::SiLU};

double act_formula(Activation act, double v) {
  switch (act) {
    case Activation::None: return v;
    case Activation::ReLU: return v > 0 ? v : 0.0;
    case Activation::GELU: return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    case Activation::GELUErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case Activation::SiLU: return v / (1.0 + std::exp(-v));
  }
  return v;
}

double silu_formula(double v) { return v / (1.0 + std::exp(-v)); }

struct BiasActCase {
  Shape x;  // [..., C]
  bool bias;
};

std::string case_name(const BiasActCase& c, Activation act) {
  return "x " + shape_str(c.x) + (c.bias ? "" : " no bias") + " " + activation_name(act);
}

// N = 1 with an odd C, odd N and C, a 3-D x, large rows (C = 8192), and no bias.
std::vector<BiasActCase> device_cases() {
  return {{{1, 767}, true}, {{37, 767}, true}, {{2, 5, 64}, true}, {{4, 8192}, true}, {{37, 767}, false}};
}

/// x of scale 2 reaches both tails of GELU and SiLU; the bias shifts each column.
std::vector<Tensor> bias_act_inputs(const BiasActCase& c, Generator& gen) {
  return {affine(random_tensor(c.x, DType::F64, kCPU, gen), 2.0, 0.0),
          c.bias ? random_tensor({c.x.back()}, DType::F64, kCPU, gen) : Tensor()};
}

TensorFn bias_act_fn(Activation act) {
  return [act](const std::vector<Tensor>& in) { return bias_act(in[0], in[1], act); };
}

// ---- bias_act on the CPU

TEST(BiasActTest, CpuF64MatchesFormula) {
  Generator gen = test_generator();
  for (const BiasActCase& c : device_cases()) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(case_name(c, act));
      const std::vector<Tensor> in = bias_act_inputs(c, gen);
      const Tensor y = bias_act(in[0], in[1], act);
      ASSERT_EQ(y.shape(), c.x);
      EXPECT_EQ(y.dtype(), DType::F64);
      const int64_t cols = c.x.back();
      const std::vector<double> vx = in[0].to_vector(),
                                vb = c.bias ? in[1].to_vector() : std::vector<double>(static_cast<size_t>(cols), 0.0);
      std::vector<double> expected(vx.size());
      for (size_t i = 0; i < vx.size(); ++i) expected[i] = act_formula(act, vx[i] + vb[i % static_cast<size_t>(cols)]);
      EXPECT_TRUE(all_close(y, Tensor::from_vector(expected, c.x, DType::F64), 1e-13));
    }
  }
}

// The CPU always runs the composite twin, whatever the kernel mode.
TEST(BiasActTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  for (const BiasActCase& c : {BiasActCase{{37, 65}, true}, BiasActCase{{2, 3, 8}, false}}) {
    const std::vector<Tensor> in = bias_act_inputs(c, gen);
    for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
      KernelModeGuard guard(mode);
      for (Activation act : kActivations)
        EXPECT_TRUE(all_equal(bias_act(in[0], in[1], act), bias_act_composite(in[0], in[1], act)))
            << kernel_mode_name(mode) << " " << case_name(c, act);
    }
  }
}

TEST(BiasActTest, GradCheckF64EveryActivation) {
  Generator gen = test_generator();
  for (const BiasActCase& c : {BiasActCase{{4, 7}, true}, BiasActCase{{2, 3, 4}, true}, BiasActCase{{3, 5}, false}}) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(case_name(c, act));
      EXPECT_TRUE(gradcheck([act](const std::vector<Tensor>& in) { return bias_act_composite(in[0], in[1], act); },
                            bias_act_inputs(c, gen), gen));
    }
  }
}

TEST(BiasActTest, Contracts) {
  const Tensor x = Tensor::zeros({4, 6});
  EXPECT_FT_ERROR(bias_act(x, Tensor::zeros({5}), Activation::GELU), "bias_act");
  EXPECT_FT_ERROR(bias_act(x, Tensor::zeros({4, 6}), Activation::ReLU), "bias_act");
  EXPECT_THROW(bias_act(x, Tensor::zeros({6}, DType::F64), Activation::SiLU), Error);
  EXPECT_NO_THROW(bias_act(x, Tensor(), Activation::GELUErf));
}

// ---- swiglu on the CPU

TEST(SwigluTest, CpuF64MatchesFormula) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1, 767}, Shape{37, 65}, Shape{2, 5, 64}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor a = affine(random_tensor(shape, DType::F64, kCPU, gen), 2.0, 0.0);
    const Tensor b = random_tensor(shape, DType::F64, kCPU, gen);
    const std::vector<double> va = a.to_vector(), vb = b.to_vector();
    std::vector<double> expected(va.size());
    for (size_t i = 0; i < va.size(); ++i) expected[i] = silu_formula(va[i]) * vb[i];
    const Tensor y = swiglu(a, b);
    ASSERT_EQ(y.shape(), shape);
    EXPECT_TRUE(all_close(y, Tensor::from_vector(expected, shape, DType::F64), 1e-13));

    // The split form takes [..., 2H] with a in the first half of each row and b in the second.
    const int64_t last = static_cast<int64_t>(shape.size()) - 1;
    const Tensor ab = cat({a, b}, last);
    const Tensor y_split = swiglu(ab);
    ASSERT_EQ(y_split.shape(), shape);
    EXPECT_TRUE(all_close(y_split, Tensor::from_vector(expected, shape, DType::F64), 1e-13));
  }
}

TEST(SwigluTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  const Tensor a = random_tensor({37, 65}, DType::F64, kCPU, gen), b = random_tensor({37, 65}, DType::F64, kCPU, gen);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    KernelModeGuard guard(mode);
    EXPECT_TRUE(all_equal(swiglu(a, b), swiglu_composite(a, b))) << kernel_mode_name(mode);
    EXPECT_TRUE(all_close(swiglu(cat({a, b}, 1)), swiglu_composite(a, b), 1e-15)) << kernel_mode_name(mode);
  }
}

TEST(SwigluTest, GradCheckF64BothForms) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor a = affine(random_tensor(shape, DType::F64, kCPU, gen), 2.0, 0.0);
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return swiglu_composite(in[0], in[1]); },
                          {a, random_tensor(shape, DType::F64, kCPU, gen)}, gen));
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); },
                          {a, random_tensor(shape, DType::F64, kCPU, gen)}, gen));
    Shape doubled = shape;
    doubled.back() *= 2;
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return swiglu(in[0]); },
                          {affine(random_tensor(doubled, DType::F64, kCPU, gen), 2.0, 0.0)}, gen));
  }
}

TEST(SwigluTest, Contracts) {
  EXPECT_FT_ERROR(swiglu(Tensor::zeros({4, 6}), Tensor::zeros({4, 5})), "swiglu");
  EXPECT_THROW(swiglu(Tensor::zeros({4, 6}), Tensor::zeros({4, 6}, DType::F64)), Error);
  EXPECT_FT_ERROR(swiglu(Tensor::zeros({4, 7})), "swiglu");  // an odd last dim has no halves
}

// ---- every device and kernel mode against the CPU f64 reference

class BiasActDeviceTest : public DeviceModeTest {};

TEST_P(BiasActDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const BiasActCase& c : device_cases()) {
      for (Activation act : kActivations) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c, act));
        EXPECT_TRUE(matches_f64_reference(bias_act_fn(act), bias_act_inputs(c, gen), device(), dtype, gen,
                                          forward_tolerance(dtype), grad_tolerance(dtype)));
      }
    }
  }
}

// A frozen bias, or an input that needs no gradient: the fused backward must skip what is not
// asked for and still produce the rest.
TEST_P(BiasActDeviceTest, PartialGradientsMatchF64Reference) {
  Generator gen = test_generator();
  const BiasActCase c{{37, 767}, true};
  for (DType dtype : fused_dtypes()) {
    for (Activation act : {Activation::GELU, Activation::SiLU}) {
      for (const std::vector<bool>& wrt : {std::vector<bool>{true, false}, std::vector<bool>{false, true}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c, act) + " wrt " + std::to_string(wrt[0]) +
                     std::to_string(wrt[1]));
        EXPECT_TRUE(matches_f64_reference(bias_act_fn(act), bias_act_inputs(c, gen), device(), dtype, gen,
                                          forward_tolerance(dtype), grad_tolerance(dtype), wrt));
      }
    }
  }
}

TEST_P(BiasActDeviceTest, SwigluMatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const Shape& shape : {Shape{1, 767}, Shape{37, 767}, Shape{2, 5, 64}, Shape{4, 8192}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      const Tensor a = affine(random_tensor(shape, DType::F64, kCPU, gen), 2.0, 0.0);
      EXPECT_TRUE(matches_f64_reference([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); },
                                        {a, random_tensor(shape, DType::F64, kCPU, gen)}, device(), dtype, gen,
                                        forward_tolerance(dtype), grad_tolerance(dtype)));
      Shape doubled = shape;
      doubled.back() *= 2;  // H odd (767) puts b at an odd column offset
      EXPECT_TRUE(matches_f64_reference([](const std::vector<Tensor>& in) { return swiglu(in[0]); },
                                        {affine(random_tensor(doubled, DType::F64, kCPU, gen), 2.0, 0.0)}, device(),
                                        dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, BiasActDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// ---- the fused CUDA path against its twin

TEST(BiasActFusedVsTwinTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const BiasActCase& c : device_cases()) {
      for (Activation act : kActivations) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c, act));
        EXPECT_TRUE(fused_matches_twin(bias_act_fn(act), bias_act_inputs(c, gen), dtype, gen, grad_tolerance(dtype)));
      }
    }
  }
}

TEST(BiasActFusedVsTwinTest, SwigluAgreesOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const Shape& shape : {Shape{1, 767}, Shape{37, 767}, Shape{4, 8192}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      EXPECT_TRUE(fused_matches_twin(
          [](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); },
          {affine(random_tensor(shape, DType::F64, kCPU, gen), 2.0, 0.0), random_tensor(shape, DType::F64, kCPU, gen)},
          dtype, gen, grad_tolerance(dtype)));
      const Shape doubled{shape[0], 2 * shape[1]};
      EXPECT_TRUE(fused_matches_twin([](const std::vector<Tensor>& in) { return swiglu(in[0]); },
                                     {affine(random_tensor(doubled, DType::F64, kCPU, gen), 2.0, 0.0)}, dtype, gen,
                                     grad_tolerance(dtype)));
    }
  }
}

// Which path ran shows in the graph: the fused op records fewer nodes than the twin's
// primitives, on CUDA in fused mode only.
TEST(BiasActFusedVsTwinTest, FusedModeRecordsFewerNodesOnCudaOnly) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = bias_act_inputs({{37, 65}, true}, gen);
  const Tensor ab = random_tensor({37, 130}, DType::F64, kCPU, gen);
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    const Tensor x = fresh_leaf(in[0], DType::F32, device), b = fresh_leaf(in[1], DType::F32, device);
    const Tensor ab_leaf = fresh_leaf(ab, DType::F32, device);
    size_t sizes[2][2];
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
      sizes[fused][0] = graph_size(bias_act(x, b, Activation::GELU));
      sizes[fused][1] = graph_size(swiglu(ab_leaf));
    }
    for (int op = 0; op < 2; ++op) {
      SCOPED_TRACE(std::string(device.str()) + (op ? " swiglu" : " bias_act"));
      EXPECT_GT(sizes[0][op], 0u);
      EXPECT_GT(sizes[1][op], 0u);
      if (device.is_cuda())
        EXPECT_LT(sizes[1][op], sizes[0][op]);
      else
        EXPECT_EQ(sizes[1][op], sizes[0][op]);
    }
  }
}

// f64 has no fused kernel: on CUDA in fused mode it runs the twin and still matches the CPU.
TEST(BiasActFusedVsTwinTest, F64OnCudaRunsTheTwin) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard guard(KernelMode::Fused);
  Generator gen = test_generator();
  for (Activation act : kActivations) {
    SCOPED_TRACE(activation_name(act));
    EXPECT_TRUE(matches_f64_reference(bias_act_fn(act), bias_act_inputs({{37, 767}, true}, gen), kCUDA, DType::F64, gen,
                                      forward_tolerance(DType::F64), grad_tolerance(DType::F64)));
  }
  EXPECT_TRUE(matches_f64_reference([](const std::vector<Tensor>& in) { return swiglu(in[0]); },
                                    {random_tensor({5, 64}, DType::F64, kCPU, gen)}, kCUDA, DType::F64, gen,
                                    forward_tolerance(DType::F64), grad_tolerance(DType::F64)));
}

}  // namespace
}  // namespace ft
