// linear, the first fused op: act(x · Wᵀ + b) for act None, ReLU and GELU. On the CPU it must
// be its composite twin and match a loop written here; on CUDA, in both kernel modes, it must
// match the CPU f64 reference in forward and in the gradients of x, W and b; and the fused and
// unfused CUDA paths must agree on the same inputs.
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "lib/grad_buffer.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/linear/linear_cuda.h"
#include "lib/ops/reduce/reduce.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

const char* act_name(Activation act) {
  switch (act) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    default: return "none";
  }
}

double activate(Activation act, double v) {
  switch (act) {
    case Activation::ReLU: return v > 0 ? v : 0.0;
    case Activation::GELU: return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    default: return v;
  }
}

const Activation kActivations[] = {Activation::None, Activation::ReLU, Activation::GELU};

struct LinearCase {
  Shape x;  // [..., IN]
  int64_t out;
  bool bias;
};

std::string case_name(const LinearCase& c, Activation act) {
  return "x " + shape_str(c.x) + " OUT " + std::to_string(c.out) + (c.bias ? "" : " no bias") + " " + act_name(act);
}

// OUT % 8 == 0 with a bias reaches the fused cuBLASLt path (N = 37 and IN = 65 are odd on
// purpose); a 3-D x folds its leading dims; OUT = 30 and a missing bias fall back to the twin.
// In bf16, OUT <= 16 with IN a multiple of 32 up to 2048, a bias and no activation take the
// narrow forward (N = 37: a last group of 5 rows; N = 300 and 1000: blocks that take several
// groups; OUT = 3 and 16: padded and full rows of W); IN = 65, 1028 and 2080 with OUT = 10 do not.
// Its dW and db kernels: one chunk of rows (N = 37, 10), several (300, 1000, and the MLP's
// classifier, 4096 × 1024 → 10: 8 column tiles by 32 chunks of one 128-row slice), a column
// tile that IN = 96 fills in part, and one output (DLRM's last layer).
std::vector<LinearCase> device_cases() {
  return {{{37, 65}, 96, true},   {{2, 5, 64}, 96, true}, {{1, 8}, 8, true},       {{37, 65}, 30, true},
          {{37, 65}, 96, false},  {{37, 64}, 10, true},   {{2, 5, 128}, 3, true},  {{300, 1024}, 16, true},
          {{1000, 96}, 10, true}, {{37, 65}, 10, true},   {{9, 1028}, 10, true},   {{4, 2080}, 10, true},
          {{4096, 1024}, 10, true}, {{513, 256}, 1, true}};
}

std::vector<Tensor> linear_inputs(const LinearCase& c, Generator& gen) {
  const int64_t in = c.x.back();
  // Weights scaled like a real initialization (1/sqrt(IN)) keep pre-activations of order one,
  // where ReLU and GELU are not trivially linear.
  const Tensor w = affine(random_tensor({c.out, in}, DType::F64, kCPU, gen), 1.0 / std::sqrt(static_cast<double>(in)), 0.0);
  return {random_tensor(c.x, DType::F64, kCPU, gen), w,
          c.bias ? random_tensor({c.out}, DType::F64, kCPU, gen) : Tensor()};
}

/// Values k · step for random integers k in [-kmax, kmax].
Tensor grid_tensor(const Shape& shape, int kmax, double step, Generator& gen) {
  std::vector<double> v = Tensor::rand(shape, gen, DType::F64).to_vector();
  for (double& x : v) x = (std::floor(x * (2 * kmax + 1)) - kmax) * step;
  return Tensor::from_vector(v, shape, DType::F64);
}

/// Inputs on a coarse grid: x in halves up to ±1, W in quarters up to ±0.25 and b in eighths up
/// to ±2, so every pre-activation x · Wᵀ + b (IN <= 65) is a multiple of 1/8 below 19 in size:
/// at most 8 significant bits, exact in bf16, f32 and every summation order.
///
/// ReLU's derivative jumps at 0. With random inputs, a bf16 rounding of a pre-activation near 0
/// (the twin rounds x · Wᵀ before adding b; the fused epilogue does not) can land on the other
/// side of 0 from the f64 value, and that element's whole gradient flips between 0 and dy. That
/// is rounding, not a kernel error, so ReLU in bf16 is compared on inputs where no rounding
/// happens before the mask is taken.
std::vector<Tensor> exact_relu_inputs(const LinearCase& c, Generator& gen) {
  return {grid_tensor(c.x, 2, 0.5, gen), grid_tensor({c.out, c.x.back()}, 1, 0.25, gen),
          c.bias ? grid_tensor({c.out}, 16, 0.125, gen) : Tensor()};
}

std::vector<Tensor> device_inputs(const LinearCase& c, Activation act, DType dtype, Generator& gen) {
  return act == Activation::ReLU && dtype == DType::BF16 ? exact_relu_inputs(c, gen) : linear_inputs(c, gen);
}

TensorFn linear_fn(Activation act) {
  return [act](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2], act); };
}

TEST(LinearTest, CpuF64MatchesLoop) {
  Generator gen = test_generator();
  for (const LinearCase& c : device_cases()) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(case_name(c, act));
      const std::vector<Tensor> in = linear_inputs(c, gen);
      const Tensor y = linear(in[0], in[1], in[2], act);
      Shape expected_shape = c.x;
      expected_shape.back() = c.out;
      ASSERT_EQ(y.shape(), expected_shape);
      const int64_t n_in = c.x.back(), rows = shape_numel(c.x) / n_in;
      const std::vector<double> vx = in[0].to_vector(), vw = in[1].to_vector(),
                                vb = c.bias ? in[2].to_vector() : std::vector<double>(static_cast<size_t>(c.out), 0.0);
      std::vector<double> expected;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < c.out; ++o) {
          double acc = vb[static_cast<size_t>(o)];
          for (int64_t i = 0; i < n_in; ++i)
            acc += vx[static_cast<size_t>(r * n_in + i)] * vw[static_cast<size_t>(o * n_in + i)];
          expected.push_back(activate(act, acc));
        }
      EXPECT_TRUE(all_close(y, Tensor::from_vector(expected, expected_shape, DType::F64), 1e-13));
    }
  }
}

// The CPU always runs the composite twin, whatever the kernel mode.
TEST(LinearTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = linear_inputs({{37, 65}, 96, true}, gen);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    KernelModeGuard guard(mode);
    for (Activation act : kActivations)
      EXPECT_TRUE(all_equal(linear(in[0], in[1], in[2], act), linear_composite(in[0], in[1], in[2], act)))
          << kernel_mode_name(mode) << " " << act_name(act);
  }
}

TEST(LinearTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const LinearCase& c : {LinearCase{{4, 3}, 5, true}, LinearCase{{2, 3, 4}, 8, true}, LinearCase{{3, 2}, 4, false}}) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(case_name(c, act));
      EXPECT_TRUE(gradcheck(linear_fn(act), linear_inputs(c, gen), gen));
    }
  }
}

// ---- CUDA in both kernel modes against the CPU f64 reference

class LinearDeviceTest : public DeviceModeTest {};

TEST_P(LinearDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const LinearCase& c : device_cases()) {
      for (Activation act : kActivations) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c, act));
        EXPECT_TRUE(matches_f64_reference(linear_fn(act), device_inputs(c, act, dtype, gen), device(), dtype, gen,
                                          forward_tolerance(dtype), grad_tolerance(dtype)));
      }
    }
  }
}

// The first layer's input needs no gradient, and frozen weights need none either: the fused
// backward must skip the missing ones and still produce the rest.
TEST_P(LinearDeviceTest, PartialGradientsMatchF64Reference) {
  Generator gen = test_generator();
  for (const LinearCase& c : {LinearCase{{37, 65}, 96, true}, LinearCase{{37, 64}, 10, true}}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (Activation act : kActivations) {
        for (const std::vector<bool>& wrt : {std::vector<bool>{false, true, true},
                                             std::vector<bool>{true, false, false},
                                             std::vector<bool>{false, false, true}}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c, act) + " wrt " + std::to_string(wrt[0]) +
                       std::to_string(wrt[1]) + std::to_string(wrt[2]));
          EXPECT_TRUE(matches_f64_reference(linear_fn(act), device_inputs(c, act, dtype, gen), device(), dtype, gen,
                                            forward_tolerance(dtype), grad_tolerance(dtype), wrt));
        }
      }
    }
  }
}

// Both fused strategies (cuBLASLt epilogue; matmul then the fused bias_act kernel) against the
// CPU f64 reference, whichever the per-shape rule would pick.
TEST(LinearFusionTest, BothFusedStrategiesMatchF64Reference) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  KernelModeGuard fused(KernelMode::Fused);
  for (LinearFusion fusion : {LinearFusion::Epilogue, LinearFusion::MatmulBiasAct}) {
    set_linear_fusion(fusion);
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (const LinearCase& c : device_cases()) {
        for (Activation act : kActivations) {
          SCOPED_TRACE(std::string(fusion == LinearFusion::Epilogue ? "epilogue " : "matmul+bias_act ") +
                       dtype_name(dtype) + " " + case_name(c, act));
          EXPECT_TRUE(matches_f64_reference(linear_fn(act), device_inputs(c, act, dtype, gen), kCUDA, dtype, gen,
                                            forward_tolerance(dtype), grad_tolerance(dtype)));
        }
      }
    }
  }
  set_linear_fusion(LinearFusion::Auto);
}

INSTANTIATE_TEST_SUITE_P(Modes, LinearDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// The narrow layer's dW and db against exact sums. On grids (x in halves up to ±1, the loss's
// weights, which become dy, in eighths up to ±2) every product and partial sum is exact in f32
// in any order, so the kernel's one rounding is the final one to bf16, and into an f32 gradient
// view there is none. One chunk of rows (sums stored directly: N = 37, and N = 100 in 8 and 2
// column tiles) and several (added by the second kernel), blocks looping over several slices (N =
// 20000: 157 slices, more than the chunks of 4 blocks an SM on fewer than 314 SMs), a last column tile that IN fills in
// part (96; 160 in the second tile), 1 and 16 outputs, only one of dW and db wanted, and f32
// views that a second backward adds to (doubling every sum, which stays exact).
TEST(NarrowLinearTest, ParameterGradientsAreTheExactSums) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard fused(KernelMode::Fused);
  Generator gen = test_generator();
  struct Case {
    int64_t n, in, out;
  };
  for (const Case& c : {Case{37, 64, 10}, Case{100, 1024, 10}, Case{100, 160, 10}, Case{300, 160, 10},
                        Case{513, 256, 1}, Case{1000, 96, 10}, Case{300, 128, 16}, Case{4096, 1024, 10},
                        Case{20000, 1024, 3}}) {
    const Tensor x = grid_tensor({c.n, c.in}, 2, 0.5, gen), w0 = grid_tensor({c.out, c.in}, 1, 0.25, gen),
                 b0 = grid_tensor({c.out}, 16, 0.125, gen), weights = grid_tensor({c.n, c.out}, 16, 0.125, gen);
    const std::vector<double> vx = x.to_vector(), vd = weights.to_vector();
    std::vector<double> dw(static_cast<size_t>(c.out * c.in), 0.0), db(static_cast<size_t>(c.out), 0.0);
    for (int64_t r = 0; r < c.n; ++r)
      for (int64_t o = 0; o < c.out; ++o) {
        const double d = vd[static_cast<size_t>(r * c.out + o)];
        db[static_cast<size_t>(o)] += d;
        for (int64_t i = 0; i < c.in; ++i) dw[static_cast<size_t>(o * c.in + i)] += d * vx[static_cast<size_t>(r * c.in + i)];
      }
    const Tensor expected_w = Tensor::from_vector(dw, {c.out, c.in}, DType::F64);
    const Tensor expected_b = Tensor::from_vector(db, {c.out}, DType::F64);
    const Tensor x_gpu = fresh_copy(x, DType::BF16, kCUDA), weights_gpu = fresh_copy(weights, DType::F32, kCUDA);
    for (const auto& [want_w, want_b, view] : std::vector<std::tuple<bool, bool, bool>>{
             {true, true, false}, {true, false, false}, {false, true, false}, {true, true, true}}) {
      SCOPED_TRACE(testing::Message() << "N " << c.n << " IN " << c.in << " OUT " << c.out << (want_w ? " dW" : "")
                                      << (want_b ? " db" : "") << (view ? " into f32 views" : ""));
      Tensor w = fresh_copy(w0, DType::BF16, kCUDA), b = fresh_copy(b0, DType::BF16, kCUDA);
      if (want_w) w.requires_grad_();
      if (want_b) b.requires_grad_();
      if constexpr (kCudaBuild) ASSERT_TRUE(cuda::narrow_linear_supported(x_gpu, w));
      std::optional<GradBuffer> buffer;
      if (view) buffer.emplace(std::vector<Tensor>{w, b});
      sum_all(cast(linear(x_gpu, w, b), DType::F32) * weights_gpu).backward();
      const DType rounded = view ? DType::F32 : DType::BF16;
      if (want_w) {
        EXPECT_TRUE(all_equal(w.grad(), cast(expected_w, rounded))) << "dW";
      }
      if (want_b) {
        EXPECT_TRUE(all_equal(b.grad(), cast(expected_b, rounded))) << "db";
      }
      EXPECT_EQ(w.grad().defined(), want_w);
      EXPECT_EQ(b.grad().defined(), want_b);
      if (view) {  // a second backward adds into the views
        sum_all(cast(linear(x_gpu, w, b), DType::F32) * weights_gpu).backward();
        EXPECT_TRUE(all_equal(w.grad(), cast(expected_w * 2.0, DType::F32))) << "dW, twice";
        EXPECT_TRUE(all_equal(b.grad(), cast(expected_b * 2.0, DType::F32))) << "db, twice";
      }
    }
  }
}

// Fused and unfused CUDA paths on the very same inputs: outputs and all three gradients agree.
TEST(LinearFusedVsUnfusedTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const LinearCase& c : {LinearCase{{37, 65}, 96, true}, LinearCase{{2, 5, 64}, 96, true},
                                LinearCase{{300, 1024}, 10, true}}) {
      for (Activation act : kActivations) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c, act));
        const std::vector<Tensor> in = device_inputs(c, act, dtype, gen);
        const Tensor upstream = random_tensor([&] {
          Shape s = c.x;
          s.back() = c.out;
          return s;
        }(), dtype, kCUDA, gen);
        std::vector<Tensor> results[2];
        for (int fused = 0; fused < 2; ++fused) {
          KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
          std::vector<Tensor> leaves;
          for (const Tensor& t : in) leaves.push_back(fresh_leaf(t, dtype, kCUDA));
          const Tensor y = linear(leaves[0], leaves[1], leaves[2], act);
          y.backward(upstream);
          results[fused] = {y, leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
        }
        const char* what[] = {"y", "dx", "dW", "db"};
        // Two rounding paths over the same inputs: allow each the bf16 or f32 budget.
        const double tol = 2.0 * grad_tolerance(dtype);
        for (int k = 0; k < 4; ++k) EXPECT_TRUE(all_close(results[1][k], results[0][k], tol)) << what[k];
      }
    }
  }
}

// Which path ran is visible only in the graph: the fused op records one "linear" node.
TEST(LinearFusedVsUnfusedTest, FusedModeRecordsOneNodeOnCudaOnly) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = linear_inputs({{37, 65}, 96, true}, gen);
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    std::vector<Tensor> leaves;
    for (const Tensor& t : in) leaves.push_back(fresh_leaf(t, DType::F32, device));
    for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
      KernelModeGuard guard(mode);
      const Tensor y = linear(leaves[0], leaves[1], leaves[2], Activation::ReLU);
      ASSERT_NE(y.grad_fn(), nullptr);
      const bool fused = mode == KernelMode::Fused && device.is_cuda();
      EXPECT_EQ(y.grad_fn()->name == "linear", fused) << device.str() << " " << kernel_mode_name(mode) << ": "
                                                       << y.grad_fn()->name;
    }
  }
}

}  // namespace
}  // namespace ft
