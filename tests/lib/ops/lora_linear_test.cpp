// lora_linear = act(x·Wᵀ + b + s·(drop(x)·Aᵀ)·Bᵀ) with W frozen. On the CPU it is its twin and
// must match a loop written here (dropout mask included) and pass a finite-difference check; on
// CUDA, in both kernel modes, it must match the CPU f64 reference in forward and in the
// gradients of x, A, B and b on odd shapes (r = 1, 8, 16, 64; IN and OUT not multiples of 8;
// dropout 0 and 0.1; with and without a bias), the fused path must agree with the twin on the
// same inputs, never produce dW, and bad inputs must be clear errors. lora_merge folds s·B·A
// into W rounded once.
#include <cmath>
#include <string>
#include <vector>

#include "lib/ops/dropout/dropout.h"
#include "lib/ops/lora_linear/lora_linear.h"
#include "lib/ops/matmul/matmul.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

struct LoRACase {
  Shape x;  // [..., IN]
  int64_t out, rank;
  bool bias;
  double dropout;
  Activation act;
};

std::string case_name(const LoRACase& c) {
  const char* act = c.act == Activation::GELU ? "gelu" : c.act == Activation::ReLU ? "relu" : "none";
  return "x " + shape_str(c.x) + " OUT " + std::to_string(c.out) + " r " + std::to_string(c.rank) +
         (c.bias ? "" : " no bias") + " p " + std::to_string(c.dropout) + " " + act;
}

constexpr uint64_t kSeed = 1234, kOffset = 40;

// Inputs as f64 CPU masters: x, W, b, A, B. B is random (not PEFT's zero start), so the
// adapter's term and every gradient are exercised; weights scaled like an initialization.
std::vector<Tensor> lora_inputs(const LoRACase& c, Generator& gen) {
  const int64_t in = c.x.back();
  const double w_scale = 1.0 / std::sqrt(static_cast<double>(in));
  return {random_tensor(c.x, DType::F64, kCPU, gen),
          random_tensor({c.out, in}, DType::F64, kCPU, gen) * w_scale,
          c.bias ? random_tensor({c.out}, DType::F64, kCPU, gen) : Tensor(),
          random_tensor({c.rank, in}, DType::F64, kCPU, gen) * w_scale,
          random_tensor({c.out, c.rank}, DType::F64, kCPU, gen) * 0.5};
}

LoRAOptions options_on(const LoRACase& c, Device device) {
  LoRAOptions o;
  o.scale = 2.0 / static_cast<double>(c.rank);
  o.dropout = c.dropout;
  o.seed = kSeed;
  if (c.dropout > 0.0) o.offset = Tensor::from_vector({static_cast<double>(kOffset)}, {1}, DType::I64, device);
  o.activation = c.act;
  return o;
}

TensorFn lora_fn(const LoRACase& c) {
  return [c](const std::vector<Tensor>& in) {
    return lora_linear(in[0], in[1], in[2], in[3], in[4], options_on(c, in[0].device()));
  };
}

// W is frozen: every input but W is differentiated (the bias only when there is one).
std::vector<bool> adapter_wrt() { return {true, false, true, true, true}; }

double act_value(Activation act, double v) {
  switch (act) {
    case Activation::ReLU: return v > 0 ? v : 0.0;
    case Activation::GELU: return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    default: return v;
  }
}

TEST(LoRALinearTest, CpuF64MatchesLoop) {
  Generator gen = test_generator();
  for (const LoRACase& c : {LoRACase{{7, 13}, 11, 3, true, 0.0, Activation::None},
                            LoRACase{{2, 3, 13}, 11, 5, true, 0.25, Activation::GELU},
                            LoRACase{{7, 13}, 11, 1, false, 0.1, Activation::ReLU}}) {
    SCOPED_TRACE(case_name(c));
    const std::vector<Tensor> in = lora_inputs(c, gen);
    const LoRAOptions o = options_on(c, kCPU);
    const Tensor y = lora_linear(in[0], in[1], in[2], in[3], in[4], o);
    const int64_t n_in = c.x.back(), rows = shape_numel(c.x) / n_in;
    // The adapter's input mask, as the dropout op draws it (kept values scaled by 1/(1 - p)).
    const std::vector<double> keep =
        c.dropout > 0.0 ? dropout(Tensor::full(c.x, 1.0, DType::F64, kCPU), c.dropout, kSeed, o.offset).to_vector()
                        : std::vector<double>(static_cast<size_t>(shape_numel(c.x)), 1.0);
    const std::vector<double> x = in[0].to_vector(), w = in[1].to_vector(), a = in[3].to_vector(),
                              b = in[4].to_vector();
    const std::vector<double> bias = c.bias ? in[2].to_vector() : std::vector<double>(static_cast<size_t>(c.out), 0.0);
    std::vector<double> expected;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> u(static_cast<size_t>(c.rank), 0.0);
      for (int64_t k = 0; k < c.rank; ++k)
        for (int64_t i = 0; i < n_in; ++i) {
          const size_t xi = static_cast<size_t>(r * n_in + i);
          u[static_cast<size_t>(k)] += x[xi] * keep[xi] * a[static_cast<size_t>(k * n_in + i)];
        }
      for (int64_t o_ = 0; o_ < c.out; ++o_) {
        double acc = bias[static_cast<size_t>(o_)];
        for (int64_t i = 0; i < n_in; ++i) acc += x[static_cast<size_t>(r * n_in + i)] * w[static_cast<size_t>(o_ * n_in + i)];
        for (int64_t k = 0; k < c.rank; ++k) acc += o.scale * u[static_cast<size_t>(k)] * b[static_cast<size_t>(o_ * c.rank + k)];
        expected.push_back(act_value(c.act, acc));
      }
    }
    Shape out_shape = c.x;
    out_shape.back() = c.out;
    EXPECT_TRUE(all_close(y, Tensor::from_vector(expected, out_shape, DType::F64), 1e-13));
  }
}

TEST(LoRALinearTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const LoRACase& c : {LoRACase{{4, 5}, 6, 2, true, 0.0, Activation::None},
                            LoRACase{{2, 3, 5}, 4, 3, true, 0.2, Activation::GELU},
                            LoRACase{{3, 5}, 7, 1, false, 0.1, Activation::None}}) {
    SCOPED_TRACE(case_name(c));
    EXPECT_TRUE(gradcheck(lora_fn(c), lora_inputs(c, gen), gen, {.wrt = adapter_wrt()}));
  }
}

// Odd shapes: N 37, IN 65, OUT 96 (the epilogue path with a bias) and 30 (not a multiple of 8),
// a 3-D x, every rank the issue names, dropout 0 and 0.1, with and without a bias, GELU on the
// fused epilogue. ReLU's kink makes bf16 roundings flip whole gradients, so it runs in f32 only.
std::vector<LoRACase> device_cases(DType dtype) {
  std::vector<LoRACase> cases;
  for (int64_t rank : {1, 8, 16, 64})
    for (double p : {0.0, 0.1}) {
      cases.push_back({{37, 65}, 96, rank, true, p, Activation::None});
      cases.push_back({{2, 5, 65}, 96, rank, true, p, Activation::GELU});
      if (rank <= 30) cases.push_back({{37, 65}, 30, rank, false, p, Activation::None});
    }
  cases.push_back({{37, 65}, 30, 8, true, 0.1, Activation::GELU});
  // Wide enough for the one-pass v and dB kernel to split OUT across blocks (v from partials).
  cases.push_back({{300, 40}, 1160, 16, true, 0.0, Activation::None});
  cases.push_back({{300, 40}, 520, 32, false, 0.1, Activation::GELU});
  if (dtype == DType::F32) cases.push_back({{37, 65}, 96, 8, true, 0.0, Activation::ReLU});
  return cases;
}

class LoRALinearDeviceTest : public DeviceModeTest {};

TEST_P(LoRALinearDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const LoRACase& c : device_cases(dtype)) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(c));
      EXPECT_TRUE(matches_f64_reference(lora_fn(c), lora_inputs(c, gen), device(), dtype, gen,
                                        forward_tolerance(dtype), grad_tolerance(dtype), adapter_wrt()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LoRALinearDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// The fused path and the twin on the very same CUDA inputs, at sizes the f64 reference would
// take long over; W never gets a gradient.
TEST(LoRALinearFusedVsTwinTest, AgreeOnCudaAndLeaveWAlone) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (const LoRACase& c : {LoRACase{{64, 96}, 160, 16, true, 0.0, Activation::GELU},
                            LoRACase{{64, 96}, 160, 16, true, 0.1, Activation::GELU},
                            LoRACase{{33, 72}, 40, 8, false, 0.1, Activation::None},
                            // The one-pass v and dB kernel: several row subtiles per block; OUT
                            // split across blocks (r 32: 256 columns a block); r 8 padded to 16;
                            // r 64 takes the two products.
                            LoRACase{{20000, 64}, 96, 16, true, 0.0, Activation::None},
                            LoRACase{{3000, 64}, 1160, 32, false, 0.0, Activation::GELU},
                            LoRACase{{3000, 64}, 1160, 64, false, 0.0, Activation::GELU},
                            LoRACase{{3000, 64}, 1160, 8, true, 0.1, Activation::None}}) {
    SCOPED_TRACE(case_name(c));
    const std::vector<Tensor> masters = lora_inputs(c, gen);
    const Tensor upstream = random_tensor({shape_numel(c.x) / c.x.back(), c.out}, DType::F64, kCPU, gen);
    std::vector<std::vector<Tensor>> results;
    for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
      KernelModeGuard guard(mode);
      std::vector<Tensor> in;
      for (size_t i = 0; i < masters.size(); ++i) {
        in.push_back(masters[i].defined() ? fresh_copy(masters[i], DType::BF16, kCUDA) : Tensor());
        if (in.back().defined() && i != 1) in.back().requires_grad_();
      }
      const Tensor y = lora_fn(c)(in);
      y.backward(fresh_copy(upstream, DType::BF16, kCUDA).reshape(y.shape()));
      EXPECT_FALSE(in[1].grad().defined()) << "W got a gradient in " << kernel_mode_name(mode);
      results.push_back({y, in[0].grad(), in[3].grad(), in[4].grad(), c.bias ? in[2].grad() : Tensor()});
    }
    const char* names[] = {"y", "dx", "dA", "dB", "db"};
    for (size_t i = 0; i < results[0].size(); ++i) {
      if (!results[1][i].defined()) continue;
      EXPECT_TRUE(all_close(results[0][i], results[1][i], 2e-2)) << names[i];
    }
  }
}

TEST(LoRALinearTest, BadInputsAreClearErrors) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({4, 8}, DType::F32, kCPU, gen), w = random_tensor({6, 8}, DType::F32, kCPU, gen);
  const Tensor a = random_tensor({2, 8}, DType::F32, kCPU, gen), b = random_tensor({6, 2}, DType::F32, kCPU, gen);
  const LoRAOptions o{.scale = 1.0};
  EXPECT_FT_ERROR(lora_linear(x, w, Tensor(), Tensor::empty({0, 8}, DType::F32, kCPU), Tensor::empty({6, 0}, DType::F32, kCPU), o),
                  "at least 1");
  EXPECT_FT_ERROR(lora_linear(x, w, Tensor(), random_tensor({7, 8}, DType::F32, kCPU, gen),
                              random_tensor({6, 7}, DType::F32, kCPU, gen), o),
                  "exceeds min(IN, OUT)");
  EXPECT_FT_ERROR(lora_linear(x, w, Tensor(), random_tensor({2, 9}, DType::F32, kCPU, gen), b, o), "lora_A must be");
  EXPECT_FT_ERROR(lora_linear(x, w, Tensor(), a, random_tensor({6, 3}, DType::F32, kCPU, gen), o), "lora_B must be");
  EXPECT_FT_ERROR(lora_linear(x, w, Tensor(), a, cast(b, DType::F64), o), "lora_B is f64");
  EXPECT_FT_ERROR(lora_linear(random_tensor({4, 7}, DType::F32, kCPU, gen), w, Tensor(), a, b, o), "does not end in");
  EXPECT_FT_ERROR(lora_linear(x, w, random_tensor({5}, DType::F32, kCPU, gen), a, b, o), "bias must be");
  EXPECT_FT_ERROR(lora_linear(x, w, Tensor(), a, b, LoRAOptions{.dropout = 1.0}), "dropout must be in [0, 1)");
  EXPECT_FT_ERROR(lora_linear(x, w, Tensor(), a, b, LoRAOptions{.dropout = 0.1}), "offset");
  if (cuda_available()) EXPECT_FT_ERROR(lora_linear(x, w, Tensor(), a.to(kCUDA), b, o), "on cuda");
}

// lora_merge: s·B·A added to W in f32 (f64 on the CPU) and rounded once.
TEST(LoRAMergeTest, MatchesTheRoundedExactSum) {
  Generator gen = test_generator();
  const Tensor w = random_tensor({40, 72}, DType::F64, kCPU, gen) * 0.1, a = random_tensor({16, 72}, DType::F64, kCPU, gen);
  const Tensor b = random_tensor({40, 16}, DType::F64, kCPU, gen) * 0.01;
  const double s = 2.0;
  std::vector<Device> devices = {kCPU};
  if (cuda_available()) devices.push_back(kCUDA);
  for (Device device : devices)
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(device.str() + " " + dtype_name(dtype));
      const Tensor wd = fresh_copy(w, dtype, device), ad = fresh_copy(a, dtype, device), bd = fresh_copy(b, dtype, device);
      // The exact sum of the rounded operands, rounded once to the dtype.
      const Tensor exact = cast(cast(wd, DType::F64).to(kCPU) + matmul(cast(bd, DType::F64).to(kCPU), cast(ad, DType::F64).to(kCPU)) * s, dtype);
      const Tensor merged = Tensor::empty(w.shape(), dtype, device);
      lora_merge(wd, ad, bd, s, merged);
      // One rounding of an f32 sum: at most one ulp of the dtype from the exactly rounded value.
      EXPECT_TRUE(all_close(merged.to(kCPU), exact, 2.0 * unit_roundoff(dtype)));
      lora_merge(wd, ad, bd, s, wd);  // in place
      EXPECT_TRUE(all_equal(wd, merged));
    }
}

}  // namespace
}  // namespace ft
