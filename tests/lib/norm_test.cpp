// layer_norm, add_layer_norm, rms_norm and add_rms_norm: fused on CUDA (lib/cuda/norm.cu),
// composite elsewhere. On the CPU each matches a loop written here and passes a gradient check
// in f64; on every device and kernel mode, in f32 and bf16, each matches the CPU f64 reference
// in forward and in every gradient, and the fused path agrees with the twin on the same inputs.
// The add forms return sum = x + residual and out = norm(sum): both outputs are checked, and the
// gradients of x and residual must flow through both. The fused backward takes x̂ from the saved
// output: checked at widths that reach every kernel configuration, for a zero gain (flagged,
// not silently wrong), and for the input's memory, freed once the caller drops it.
// Dimension letters: N rows, C columns.
#include <cmath>
#include <string>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/layer_norm.h"
#include "lib/ops/random.h"
#include "lib/ops/rms_norm.h"
#include "lib/ops/shape_ops.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

/// Layer norm of each row in doubles: biased variance, eps inside the root.
std::vector<double> reference_layer_norm(const std::vector<double>& x, const std::vector<double>& w,
                                         const std::vector<double>& b, int64_t c, double eps) {
  std::vector<double> out(x.size());
  const size_t cols = static_cast<size_t>(c);
  for (size_t r = 0; r * cols < x.size(); ++r) {
    const double* row = x.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (size_t j = 0; j < cols; ++j) mean += row[j];
    mean /= static_cast<double>(c);
    for (size_t j = 0; j < cols; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(c);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (size_t j = 0; j < cols; ++j) out[r * cols + j] = (row[j] - mean) * inv * w[j] + b[j];
  }
  return out;
}

/// RMS norm of each row in doubles: x / √(mean(x²) + eps) · w.
std::vector<double> reference_rms_norm(const std::vector<double>& x, const std::vector<double>& w, int64_t c,
                                       double eps) {
  std::vector<double> out(x.size());
  const size_t cols = static_cast<size_t>(c);
  for (size_t r = 0; r * cols < x.size(); ++r) {
    const double* row = x.data() + r * cols;
    double ms = 0.0;
    for (size_t j = 0; j < cols; ++j) ms += row[j] * row[j];
    ms /= static_cast<double>(c);
    const double inv = 1.0 / std::sqrt(ms + eps);
    for (size_t j = 0; j < cols; ++j) out[r * cols + j] = row[j] * inv * w[j];
  }
  return out;
}

enum class Op { LayerNorm, RmsNorm, AddLayerNorm, AddRmsNorm };
const Op kOps[] = {Op::LayerNorm, Op::RmsNorm, Op::AddLayerNorm, Op::AddRmsNorm};

const char* op_name(Op op) {
  switch (op) {
    case Op::LayerNorm: return "layer_norm";
    case Op::RmsNorm: return "rms_norm";
    case Op::AddLayerNorm: return "add_layer_norm";
    case Op::AddRmsNorm: return "add_rms_norm";
  }
  return "?";
}
bool is_add(Op op) { return op == Op::AddLayerNorm || op == Op::AddRmsNorm; }
bool is_layer(Op op) { return op == Op::LayerNorm || op == Op::AddLayerNorm; }

/// The add forms' two outputs side by side along the last dim: a random upstream gradient of
/// this is a loss that uses both sum and out.
Tensor both(const AddNormResult& r) { return cat({r.sum, r.out}, -1); }

/// Inputs in the order x, residual, weight, bias (residual and bias undefined where the op has
/// none). x and residual have their own offset and scale, so centring and scaling both matter.
/// The gains are of either sign and away from 0 (gain_tensor says why).
std::vector<Tensor> norm_inputs(Op op, const Shape& shape, Generator& gen) {
  const int64_t c = shape.back();
  return {affine(random_tensor(shape, DType::F64, kCPU, gen), 2.0, 0.5),
          is_add(op) ? affine(random_tensor(shape, DType::F64, kCPU, gen), 1.5, -0.25) : Tensor(),
          gain_tensor({c}, DType::F64, kCPU, gen), is_layer(op) ? random_tensor({c}, DType::F64, kCPU, gen) : Tensor()};
}

/// The op on norm_inputs; the add forms return both outputs (`out_only`: just out).
TensorFn norm_fn(Op op, bool out_only = false) {
  return [op, out_only](const std::vector<Tensor>& in) -> Tensor {
    switch (op) {
      case Op::LayerNorm: return layer_norm(in[0], in[2], in[3]);
      case Op::RmsNorm: return rms_norm(in[0], in[2]);
      case Op::AddLayerNorm: {
        const AddNormResult r = add_layer_norm(in[0], in[1], in[2], in[3]);
        return out_only ? r.out : both(r);
      }
      case Op::AddRmsNorm: {
        const AddNormResult r = add_rms_norm(in[0], in[1], in[2]);
        return out_only ? r.out : both(r);
      }
    }
    return Tensor();
  };
}

// N = 1 with an odd C, odd N and C, a 3-D x, large rows (C = 8192). Few columns are
// ill-conditioned for x's gradient (composites_test.cpp says why), so the small shapes start at
// C = 8, except C = 1 for layer_norm, where the row normalizes to exactly zero and x's gradient
// is exactly zero. (rms_norm at C = 1 gives ±w, and x's gradient w·eps/(x² + eps)^1.5 is a
// difference of two terms near 1: pure cancellation, so it is left out.)
std::vector<Shape> device_shapes(Op op) {
  std::vector<Shape> shapes{{1, 767}, {37, 767}, {2, 5, 64}, {4, 8192}, {1, 8}};
  if (is_layer(op)) shapes.push_back({3, 1});
  return shapes;
}

// ---- the CPU

TEST(RmsNormTest, CpuF64MatchesReference) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{1, 3}, Shape{3, 129}, Shape{1, 767}, Shape{2, 5, 64}, Shape{4, 8192}}) {
    for (double eps : {1e-6, 0.1}) {
      SCOPED_TRACE(shape_str(shape) + " eps " + std::to_string(eps));
      const int64_t c = shape.back();
      const Tensor x = affine(random_tensor(shape, DType::F64, kCPU, gen), 2.5, 1.5);
      const Tensor w = random_tensor({c}, DType::F64, kCPU, gen);
      const Tensor y = rms_norm(x, w, eps);
      ASSERT_EQ(y.shape(), shape);
      EXPECT_EQ(y.dtype(), DType::F64);
      EXPECT_TRUE(all_close(
          y, Tensor::from_vector(reference_rms_norm(x.to_vector(), w.to_vector(), c, eps), shape, DType::F64), 1e-12));
    }
  }
}

TEST(RmsNormTest, DefaultEpsIsOneMillionth) {
  // A row of zeros but one tiny element: eps decides the result.
  const Tensor x = Tensor::from_vector({1e-3, 0, 0, 0}, {1, 4}, DType::F64);
  const Tensor w = Tensor::full({4}, 1.0, DType::F64);
  EXPECT_TRUE(all_close(
      rms_norm(x, w),
      Tensor::from_vector(reference_rms_norm(x.to_vector(), w.to_vector(), 4, 1e-6), {1, 4}, DType::F64), 1e-12));
}

// The add forms on the CPU: sum is exactly x + residual, out is the norm of sum, in f64 and f32.
TEST(AddNormTest, CpuSumIsXPlusResidualAndOutIsTheNormOfSum) {
  Generator gen = test_generator();
  for (DType dtype : {DType::F64, DType::F32}) {
    for (const Shape& shape : {Shape{1, 767}, Shape{33, 257}, Shape{2, 5, 64}}) {
      for (Op op : {Op::AddLayerNorm, Op::AddRmsNorm}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + op_name(op) + " " + shape_str(shape));
        std::vector<Tensor> in = norm_inputs(op, shape, gen);
        for (Tensor& t : in)
          if (t.defined()) t = t.to(dtype);
        const int64_t c = shape.back();
        const AddNormResult r = op == Op::AddLayerNorm ? add_layer_norm(in[0], in[1], in[2], in[3], 0.01)
                                                       : add_rms_norm(in[0], in[1], in[2], 0.01);
        ASSERT_EQ(r.sum.shape(), shape);
        ASSERT_EQ(r.out.shape(), shape);
        EXPECT_EQ(r.sum.dtype(), dtype);
        EXPECT_EQ(r.out.dtype(), dtype);
        EXPECT_TRUE(all_equal(r.sum, in[0] + in[1]));
        const std::vector<double> sum = r.sum.to_vector();
        const std::vector<double> expected =
            op == Op::AddLayerNorm ? reference_layer_norm(sum, in[2].to_vector(), in[3].to_vector(), c, 0.01)
                                   : reference_rms_norm(sum, in[2].to_vector(), c, 0.01);
        EXPECT_TRUE(all_close(r.out, Tensor::from_vector(expected, shape, DType::F64),
                              dtype == DType::F64 ? 1e-12 : forward_tolerance(dtype)));
      }
    }
  }
}

// The CPU always runs the composite twins, whatever the kernel mode.
TEST(NormTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  const Shape shape{37, 65};
  const std::vector<Tensor> in = norm_inputs(Op::AddLayerNorm, shape, gen);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    KernelModeGuard guard(mode);
    SCOPED_TRACE(kernel_mode_name(mode));
    EXPECT_TRUE(all_equal(layer_norm(in[0], in[2], in[3]), layer_norm_composite(in[0], in[2], in[3])));
    EXPECT_TRUE(all_equal(rms_norm(in[0], in[2]), rms_norm_composite(in[0], in[2])));
    const AddNormResult l = add_layer_norm(in[0], in[1], in[2], in[3]);
    EXPECT_TRUE(all_close(l.out, layer_norm_composite(in[0] + in[1], in[2], in[3]), 1e-15));
    const AddNormResult r = add_rms_norm(in[0], in[1], in[2]);
    EXPECT_TRUE(all_close(r.out, rms_norm_composite(in[0] + in[1], in[2]), 1e-15));
  }
}

TEST(NormTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t c = shape.back();
    const Tensor x = affine(random_tensor(shape, DType::F64, kCPU, gen), 2.0, 0.5);
    const Tensor w = random_tensor({c}, DType::F64, kCPU, gen), b = random_tensor({c}, DType::F64, kCPU, gen);
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return rms_norm_composite(in[0], in[1]); }, {x, w}, gen))
        << "rms_norm_composite";
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 0.1); }, {x, w}, gen))
        << "rms_norm, eps 0.1";
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return layer_norm_composite(in[0], in[1], in[2]); },
                          {x, w, b}, gen))
        << "layer_norm_composite";
    // The add forms, with a loss over both outputs (and over out alone).
    for (Op op : {Op::AddLayerNorm, Op::AddRmsNorm}) {
      for (bool out_only : {false, true}) {
        EXPECT_TRUE(gradcheck(norm_fn(op, out_only), norm_inputs(op, shape, gen), gen))
            << op_name(op) << (out_only ? " (out only)" : " (sum and out)");
      }
    }
  }
}

TEST(NormTest, Contracts) {
  const Tensor x = Tensor::zeros({4, 6});
  EXPECT_FT_ERROR(rms_norm(x, Tensor::zeros({5})), "rms_norm");
  EXPECT_FT_ERROR(rms_norm(x, Tensor()), "rms_norm");
  EXPECT_FT_ERROR(layer_norm(x, Tensor::zeros({6}), Tensor::zeros({5})), "layer_norm");
  EXPECT_FT_ERROR(add_layer_norm(x, Tensor::zeros({4, 5}), Tensor::zeros({6}), Tensor::zeros({6})), "layer_norm");
  EXPECT_FT_ERROR(add_layer_norm(x, Tensor::zeros({6}), Tensor::zeros({6}), Tensor::zeros({6})), "layer_norm");
  EXPECT_FT_ERROR(add_layer_norm(x, x, Tensor::zeros({5}), Tensor::zeros({6})), "layer_norm");
  EXPECT_FT_ERROR(add_rms_norm(x, Tensor::zeros({3, 6}), Tensor::zeros({6})), "rms_norm");
  EXPECT_FT_ERROR(add_rms_norm(x, x, Tensor::zeros({7})), "rms_norm");
}

// ---- every device and kernel mode against the CPU f64 reference

class NormDeviceTest : public DeviceModeTest {};

TEST_P(NormDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (Op op : kOps) {
      for (const Shape& shape : device_shapes(op)) {
        for (bool out_only : is_add(op) ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + op_name(op) + " " + shape_str(shape) +
                       (out_only ? " (out only)" : ""));
          EXPECT_TRUE(matches_f64_reference(norm_fn(op, out_only), norm_inputs(op, shape, gen), device(), dtype, gen,
                                            forward_tolerance(dtype), grad_tolerance(dtype)));
        }
      }
    }
  }
}

// Frozen weights, or an input that needs no gradient: the fused backward skips what is not
// asked for and still produces the rest.
TEST_P(NormDeviceTest, PartialGradientsMatchF64Reference) {
  Generator gen = test_generator();
  const Shape shape{37, 767};
  for (DType dtype : fused_dtypes()) {
    for (Op op : kOps) {
      for (const std::vector<bool>& wrt :
           {std::vector<bool>{true, true, false, false}, std::vector<bool>{false, false, true, true},
            std::vector<bool>{false, true, false, false}, std::vector<bool>{false, false, false, true}}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << op_name(op) << " wrt " << wrt[0] << wrt[1]
                                        << wrt[2] << wrt[3]);
        EXPECT_TRUE(matches_f64_reference(norm_fn(op), norm_inputs(op, shape, gen), device(), dtype, gen,
                                          forward_tolerance(dtype), grad_tolerance(dtype), wrt));
      }
    }
  }
}

TEST_P(NormDeviceTest, AddNormSumIsXPlusResidual) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (Op op : {Op::AddLayerNorm, Op::AddRmsNorm}) {
      for (const Shape& shape : {Shape{1, 767}, Shape{37, 767}, Shape{4, 8192}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + op_name(op) + " " + shape_str(shape));
        const std::vector<Tensor> in = norm_inputs(op, shape, gen);
        const Tensor x = fresh_copy(in[0], dtype, device()), res = fresh_copy(in[1], dtype, device());
        const Tensor w = fresh_copy(in[2], dtype, device());
        const AddNormResult r = op == Op::AddLayerNorm ? add_layer_norm(x, res, w, fresh_copy(in[3], dtype, device()))
                                                       : add_rms_norm(x, res, w);
        EXPECT_EQ(r.sum.device(), device());
        EXPECT_EQ(r.sum.dtype(), dtype);
        // One addition in f32 is one rounding, whoever does it. bf16 may round the f32 sum
        // (twice) or the exact sum (once): at most one bf16 rounding apart.
        if (dtype == DType::F32)
          EXPECT_TRUE(all_equal(r.sum, x + res));
        else
          EXPECT_TRUE(all_close(r.sum, fresh_copy(x, DType::F64, kCPU) + fresh_copy(res, DType::F64, kCPU),
                                unit_roundoff(dtype)));
      }
    }
  }
}

// sum = x + residual, so x and residual get the same gradient, whichever outputs the loss uses;
// with the loss on sum alone, that gradient is the upstream gradient itself and the weights get
// none (or zeros).
TEST_P(NormDeviceTest, AddNormGradientsFlowThroughBothOutputs) {
  Generator gen = test_generator();
  const Shape shape{37, 767};
  for (DType dtype : fused_dtypes()) {
    for (Op op : {Op::AddLayerNorm, Op::AddRmsNorm}) {
      for (int uses = 0; uses < 3; ++uses) {  // 0: sum and out, 1: out only, 2: sum only
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << op_name(op) << " loss on "
                                        << (uses == 0   ? "sum and out"
                                            : uses == 1 ? "out"
                                                        : "sum"));
        const std::vector<Tensor> in = norm_inputs(op, shape, gen);
        std::vector<Tensor> leaves;
        for (const Tensor& t : in) leaves.push_back(t.defined() ? fresh_leaf(t, dtype, device()) : Tensor());
        const AddNormResult r = op == Op::AddLayerNorm ? add_layer_norm(leaves[0], leaves[1], leaves[2], leaves[3])
                                                       : add_rms_norm(leaves[0], leaves[1], leaves[2]);
        const Tensor d_sum = random_tensor(shape, dtype, device(), gen),
                     d_out = random_tensor(shape, dtype, device(), gen);
        Tensor loss;
        if (uses == 0) loss = sum_all(r.sum * d_sum) + sum_all(r.out * d_out);
        if (uses == 1) loss = sum_all(r.out * d_out);
        if (uses == 2) loss = sum_all(r.sum * d_sum);
        loss.backward();
        ASSERT_TRUE(leaves[0].grad().defined());
        ASSERT_TRUE(leaves[1].grad().defined());
        EXPECT_TRUE(all_equal(leaves[0].grad(), leaves[1].grad())) << "dx == dresidual";
        if (uses == 2) {
          // sum_all(sum · d_sum)'s gradient is d_sum (through mul, in dtype: exact).
          EXPECT_TRUE(all_equal(leaves[0].grad(), d_sum));
          for (int k : {2, 3}) {
            if (!leaves[k].defined() || !leaves[k].grad().defined()) continue;
            EXPECT_TRUE(all_equal(leaves[k].grad(), Tensor::zeros(leaves[k].shape(), dtype))) << "input " << k;
          }
        } else {
          ASSERT_TRUE(leaves[2].grad().defined());
          if (leaves[3].defined()) {
            ASSERT_TRUE(leaves[3].grad().defined());
          }
        }
      }
    }
  }
}

// layer_norm_act_dropout: the norm with an activation and Philox dropout after it. The mask is
// keyed on (seed, offset, element), so the CPU f64 reference draws the same one.
// Offsets: a multiple of 8 (what PhiloxCounter hands out: a pack of 8 is one Philox call) and a
// multiple of 4 only (the kernels' general path).
struct Epilogue {
  Activation act;
  double p;
  uint64_t offset = 8 * 99;  // a multiple of 8, as PhiloxCounter hands out
};
const Epilogue kEpilogues[] = {
    {Activation::GELU, 0.1, 8 * 99}, {Activation::None, 0.3, 4 * 99}, {Activation::ReLU, 0.0, 8 * 99}};

TensorFn norm_act_dropout(const Epilogue& e) {
  return [e](const std::vector<Tensor>& in) {
    return layer_norm_act_dropout(in[0], in[1], in[2], e.act, e.p, 17, philox_offset(e.offset, in[0].device()));
  };
}

TEST_P(NormDeviceTest, ActDropoutMatchesF64Reference) {
  Generator gen = test_generator();
  for (const Epilogue& e : kEpilogues)
    for (DType dtype : {DType::F32, DType::BF16})
      for (int64_t c : {768, 13}) {
        SCOPED_TRACE(std::string(activation_name(e.act)) + " p " + std::to_string(e.p) + " " + dtype_name(dtype) +
                     " C " + std::to_string(c));
        EXPECT_TRUE(matches_f64_reference(norm_act_dropout(e),
                                          {random_tensor({37, c}, DType::F64, kCPU, gen),
                                           uniform_tensor({c}, DType::F64, kCPU, gen, 0.5, 1.5),
                                           random_tensor({c}, DType::F64, kCPU, gen)},
                                          device(), dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)));
      }
}

// The plain and add forms' fused backward takes x̂ = (y − b)/w from the saved output (1/w held
// per thread for f32 and unpacked rows, taken per pack for packed bf16). Widths that reach
// every kernel configuration: warp rows packed (96, 200; 768 in bf16), block rows packed (768
// and 1000 in f32, 2048 in bf16) and unpacked (4097); 37 rows leave a block's last warps idle.
const int64_t kOddWidths[] = {96, 200, 768, 1000, 2048, 4097};

// (On the CPU and in unfused mode this is the twin, which MatchesF64Reference covers.)
TEST(NormFusedTest, OutputSavingBackwardMatchesF64ReferenceAtOddWidths) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard fused(KernelMode::Fused);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes())
    for (Op op : kOps)
      for (int64_t c : kOddWidths)
        for (bool out_only : is_add(op) ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + op_name(op) + " C " + std::to_string(c) +
                       (out_only ? " (out only)" : ""));
          EXPECT_TRUE(matches_f64_reference(norm_fn(op, out_only), norm_inputs(op, {37, c}, gen), kCUDA, dtype, gen,
                                            forward_tolerance(dtype), grad_tolerance(dtype)));
        }
}

// A zero gain erases x̂ from the output, so the fused backward cannot form that column's
// gradients: it must say so (a device error, thrown at the next synchronizing read) rather than
// return numbers. The twins save their input and have no such limit, nor does the epilogue form.
TEST_P(NormDeviceTest, ZeroGainIsFlaggedByTheFusedBackwardOnly) {
  Generator gen = test_generator();
  const Shape shape{37, 200};
  const int64_t zero_column = 5;
  const bool flags = device().is_cuda() && kernel_mode() == KernelMode::Fused;
  for (DType dtype : fused_dtypes()) {
    for (Op op : kOps) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + op_name(op));
      std::vector<Tensor> in = norm_inputs(op, shape, gen);
      std::vector<double> w = in[2].to_vector();
      w[zero_column] = 0.0;
      in[2] = Tensor::from_vector(w, {shape.back()}, DType::F64);
      if (!flags) {
        EXPECT_TRUE(matches_f64_reference(norm_fn(op), in, device(), dtype, gen, forward_tolerance(dtype),
                                          grad_tolerance(dtype)));
        continue;
      }
      std::vector<Tensor> leaves;
      for (const Tensor& t : in) leaves.push_back(t.defined() ? fresh_leaf(t, dtype, device()) : Tensor());
      const Tensor y = norm_fn(op)(leaves);
      synchronize();  // the forward alone is fine: it saves, it does not divide
      y.backward(random_tensor(y.shape(), dtype, device(), gen));
      try {  // the first synchronizing read throws and clears the flag
        synchronize();
        ADD_FAILURE() << "no device error for a zero gain";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("weight"), std::string::npos) << e.what();
      }
      const std::vector<double> dx = leaves[0].grad().to_vector(), dw = leaves[2].grad().to_vector();
      for (int64_t r = 0; r < shape[0]; ++r)
        for (int64_t j = 0; j < shape[1]; ++j)
          ASSERT_EQ(std::isnan(dx[static_cast<size_t>(r * shape[1] + j)]), j == zero_column)
              << "row " << r << " column " << j;
      EXPECT_TRUE(std::isnan(dw[static_cast<size_t>(zero_column)]));
    }
  }
  if (!flags) return;
  // The epilogue form saves its input: a zero gain is just a gain.
  for (DType dtype : fused_dtypes()) {
    std::vector<double> w = gain_tensor({768}, DType::F64, kCPU, gen).to_vector();
    w[zero_column] = 0.0;
    const std::vector<Tensor> inputs{random_tensor({37, 768}, DType::F64, kCPU, gen),
                                     Tensor::from_vector(w, {768}, DType::F64),
                                     random_tensor({768}, DType::F64, kCPU, gen)};
    EXPECT_TRUE(matches_f64_reference(norm_act_dropout({Activation::GELU, 0.1}), inputs, device(), dtype, gen,
                                      forward_tolerance(dtype), grad_tolerance(dtype)))
        << dtype_name(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, NormDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// ---- the fused CUDA path against its twin

TEST(NormFusedVsTwinTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (Op op : kOps) {
      for (const Shape& shape : device_shapes(op)) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + op_name(op) + " " + shape_str(shape));
        EXPECT_TRUE(fused_matches_twin(norm_fn(op), norm_inputs(op, shape, gen), dtype, gen, grad_tolerance(dtype)));
      }
    }
  }
}

TEST(NormFusedVsTwinTest, ActDropoutAgreesOnCudaInOneNode) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (const Epilogue& e : kEpilogues)
    for (DType dtype : fused_dtypes()) {
      SCOPED_TRACE(std::string(activation_name(e.act)) + " p " + std::to_string(e.p) + " " + dtype_name(dtype));
      const std::vector<Tensor> inputs{random_tensor({300, 768}, DType::F64, kCPU, gen),
                                       uniform_tensor({768}, DType::F64, kCPU, gen, 0.5, 1.5),
                                       random_tensor({768}, DType::F64, kCPU, gen)};
      EXPECT_TRUE(fused_matches_twin(norm_act_dropout(e), inputs, dtype, gen, forward_tolerance(dtype)));
      KernelModeGuard fused(KernelMode::Fused);
      const Tensor x = fresh_leaf(inputs[0], dtype, kCUDA);
      EXPECT_EQ(graph_size(norm_act_dropout(e)({x, fresh_leaf(inputs[1], dtype, kCUDA),
                                                fresh_leaf(inputs[2], dtype, kCUDA)})),
                1u)
          << "the fused kernel did not run";
    }
}

// The backward's optional third output: dx's column sums as stored (a linear layer's bias
// gradient), in the epilogue form (the MLP's) and the plain one with the residual stream's
// addend (GPT-2's projections). Asking for it changes nothing else (dx, dweight, dbias bitwise).
// The sums are the f64 column sums of the dx written, within f32 summation and the output's
// rounding; into an f32 view they are added (f32 summation error only). Widths reach warp rows
// of packs (768: the plain form's staged rows, whose sums go through registers into the stages'
// memory; 1024: its unstaged rows, registers into a third slice), unpacked rows (13), block rows
// of packs (3000) and unpacked ones (3001); 4096 and 600 rows give the blocks several rows each
// (the slices accumulate) and more row blocks than the sum kernel's warps take in one round.
TEST(NormFusedTest, BackwardSumsTheColumnsOfDx) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (const bool plain : {false, true})
    for (DType dtype : {DType::BF16, DType::F32})
      for (const Shape& shape :
           {Shape{300, 768}, Shape{4096, 1024}, Shape{37, 13}, Shape{600, 3000}, Shape{600, 3001}}) {
        SCOPED_TRACE(std::string(plain ? "plain " : "epilogue ") + dtype_name(dtype) + " " + shape_str(shape));
        const int64_t rows = shape[0], cols = shape[1];
        const Tensor x = random_tensor(shape, dtype, kCUDA, gen), dy = random_tensor(shape, dtype, kCUDA, gen);
        const Tensor w = uniform_tensor({cols}, dtype, kCUDA, gen, 0.5, 1.5),
                     b = random_tensor({cols}, dtype, kCUDA, gen);
        const NormEpilogue epilogue =
            plain ? NormEpilogue{}
                  : NormEpilogue{.act = Activation::GELU, .dropout_p = 0.1, .seed = 17,
                                 .offset = philox_offset(8 * 99, kCUDA), .mask = Tensor()};
        const Tensor out = Tensor::empty(shape, dtype, kCUDA), rstd = Tensor::empty({rows}, DType::F32, kCUDA);
        const Tensor mean = plain ? Tensor() : Tensor::empty({rows}, DType::F32, kCUDA);
        const Tensor addend = plain ? random_tensor(shape, dtype, kCUDA, gen) : Tensor();
        cuda::norm_forward(NormKind::Layer, x, Tensor(), w, b, 1e-5, Tensor(), out, mean, rstd, epilogue);
        auto backward = [&](const GradOutput& dx_sums) {
          std::vector<Tensor> grads{Tensor::empty(shape, dtype, kCUDA), Tensor::empty({cols}, dtype, kCUDA),
                                    Tensor::empty({cols}, dtype, kCUDA)};
          cuda::norm_backward(NormKind::Layer, dy, plain ? out : x, w, mean, rstd, grads[0], grads[1], grads[2],
                              epilogue, b, addend, dx_sums);
          return grads;
        };
        const std::vector<Tensor> without = backward(GradOutput());
        const Tensor sums = Tensor::empty({cols}, dtype, kCUDA);
        const std::vector<Tensor> with_sums = backward(GradOutput(sums));
        for (size_t i = 0; i < without.size(); ++i) EXPECT_TRUE(all_equal(with_sums[i], without[i])) << "gradient " << i;
        const std::vector<double> dx = with_sums[0].to_vector();
        std::vector<double> expected(static_cast<size_t>(cols), 0.0), magnitude(static_cast<size_t>(cols), 0.0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            expected[static_cast<size_t>(c)] += dx[static_cast<size_t>(r * cols + c)];
            magnitude[static_cast<size_t>(c)] += std::abs(dx[static_cast<size_t>(r * cols + c)]);
          }
        const double rounding = dtype == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -23);
        // f32 summation of `rows` terms, then (into a tensor of dtype) one rounding.
        auto check = [&](const std::vector<double>& got, const std::vector<double>& base, double output_rounding,
                         const char* what) {
          for (int64_t c = 0; c < cols; ++c) {
            const size_t i = static_cast<size_t>(c);
            const double want = base[i] + expected[i];
            const double summation =
                static_cast<double>(rows) * std::ldexp(1.0, -24) * (magnitude[i] + std::abs(base[i]));
            ASSERT_NEAR(got[i], want, output_rounding * std::abs(want) + summation + 1e-7) << what << ", column " << c;
          }
        };
        check(sums.to_vector(), std::vector<double>(static_cast<size_t>(cols), 0.0), rounding, "overwritten");
        // Into an f32 view that already holds a gradient: added.
        const Tensor base = random_tensor({cols}, DType::F32, kCUDA, gen), view = fresh_copy(base, DType::F32, kCUDA);
        backward(GradOutput(view, true, true));
        check(view.to_vector(), base.to_vector(), std::ldexp(1.0, -24), "added into an f32 view");
      }
}

TEST(NormTest, ActDropoutGradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck(norm_act_dropout({Activation::GELU, 0.25}),
                        {random_tensor({3, 6}, DType::F64, kCPU, gen), uniform_tensor({6}, DType::F64, kCPU, gen, 0.5, 1.5),
                         random_tensor({6}, DType::F64, kCPU, gen)},
                        gen));
}

TEST(NormFusedVsTwinTest, FusedModeRecordsFewerNodesOnCudaOnly) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = norm_inputs(Op::AddLayerNorm, {37, 65}, gen);
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    std::vector<Tensor> leaves;
    for (const Tensor& t : in) leaves.push_back(fresh_leaf(t, DType::F32, device));
    size_t sizes[2][4];
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
      sizes[fused][0] = graph_size(layer_norm(leaves[0], leaves[2], leaves[3]));
      sizes[fused][1] = graph_size(rms_norm(leaves[0], leaves[2]));
      sizes[fused][2] = graph_size(add_layer_norm(leaves[0], leaves[1], leaves[2], leaves[3]).out);
      sizes[fused][3] = graph_size(add_rms_norm(leaves[0], leaves[1], leaves[2]).out);
    }
    for (int op = 0; op < 4; ++op) {
      SCOPED_TRACE(std::string(device.str()) + " " + op_name(kOps[op]));
      EXPECT_GT(sizes[1][op], 0u);
      if (device.is_cuda())
        EXPECT_LT(sizes[1][op], sizes[0][op]);
      else
        EXPECT_EQ(sizes[1][op], sizes[0][op]);
    }
  }
}

TEST(NormFusedVsTwinTest, OutputSavingBackwardAgreesOnCudaAtOddWidths) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes())
    for (Op op : kOps)
      for (int64_t c : kOddWidths) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + op_name(op) + " C " + std::to_string(c));
        EXPECT_TRUE(fused_matches_twin(norm_fn(op), norm_inputs(op, {37, c}, gen), dtype, gen, grad_tolerance(dtype)));
      }
}

// The fused plain and add forms keep their output for backward, not their input. The caller
// drops x and residual, op outputs that nothing else saves (as the residual stream's tensors
// are), and the add form's sum: while the output and its graph live, only the output (and rstd,
// [N] f32) stays allocated, where keeping the input held an [N, C] tensor more. Backward then
// still matches the twin with the freed input's memory written over.
TEST(NormFusedMemoryTest, TheInputIsFreedWhileTheOutputAndItsGraphLive) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  // 12 MB tensors: allocation granularity (2 MB at most) cannot blur one of them.
  const Shape shape{8192, 768};
  const size_t bytes = static_cast<size_t>(shape[0] * shape[1]) * dtype_size(DType::BF16);
  for (Op op : kOps) {
    SCOPED_TRACE(op_name(op));
    const std::vector<Tensor> in = norm_inputs(op, shape, gen);
    std::vector<Tensor> leaves;
    for (const Tensor& t : in) leaves.push_back(t.defined() ? fresh_leaf(t, DType::BF16, kCUDA) : Tensor());
    const Tensor up = random_tensor(shape, DType::BF16, kCUDA, gen);
    auto forward = [&] {
      const Tensor x = affine(leaves[0], 1.0, 0.0);  // affine saves nothing for backward
      const Tensor residual = is_add(op) ? affine(leaves[1], 1.0, 0.0) : Tensor();
      return norm_fn(op, /*out_only=*/true)({x, residual, leaves[2], leaves[3]});
    };
    std::vector<Tensor> grads[2];
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard mode(fused ? KernelMode::Fused : KernelMode::Unfused);
      for (const Tensor& leaf : leaves)
        if (leaf.defined()) leaf.zero_grad();
      synchronize();
      const size_t before = device_memory_in_use();
      const Tensor y = forward();
      if (fused) {
        synchronize();
        const size_t held = device_memory_in_use() - before;
        EXPECT_GE(held, bytes);
        EXPECT_LT(held, bytes + bytes / 2) << held << " bytes held for an output of " << bytes;
      }
      // Take the freed input's memory and write over it.
      const Tensor junk[2] = {Tensor::full(shape, 1e4, DType::BF16, kCUDA),
                              Tensor::full(shape, -1e4, DType::BF16, kCUDA)};
      y.backward(up);
      for (const Tensor& leaf : leaves)
        grads[fused].push_back(leaf.defined() ? fresh_copy(leaf.grad(), DType::F32, kCPU) : Tensor());
    }
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!leaves[i].defined()) continue;
      EXPECT_TRUE(all_close(grads[1][i], grads[0][i], 2.0 * grad_tolerance(DType::BF16))) << "input " << i;
    }
  }
}

// f64 has no fused kernel: on CUDA in fused mode it runs the twin and still matches the CPU.
TEST(NormFusedVsTwinTest, F64OnCudaRunsTheTwin) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard guard(KernelMode::Fused);
  Generator gen = test_generator();
  for (Op op : kOps) {
    SCOPED_TRACE(op_name(op));
    EXPECT_TRUE(matches_f64_reference(norm_fn(op), norm_inputs(op, {37, 767}, gen), kCUDA, DType::F64, gen,
                                      forward_tolerance(DType::F64), grad_tolerance(DType::F64)));
  }
}

}  // namespace
}  // namespace ft
