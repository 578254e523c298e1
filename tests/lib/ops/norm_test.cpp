// layer_norm, add_layer_norm, rms_norm and add_rms_norm: fused on CUDA (lib/ops/norm/norm_forward.cu, norm_backward.cu),
// composite elsewhere. On the CPU each matches a loop written here and passes a gradient check
// in f64; on every device and kernel mode, in f32 and bf16, each matches the CPU f64 reference
// in forward and in every gradient, and the fused path agrees with the twin on the same inputs (norm_fused_cuda_test.cpp).
// The add forms return sum = x + residual and out = norm(sum): both outputs are checked, and the
// gradients of x and residual must flow through both. The fused backward takes x̂ from the saved
// output: checked at widths that reach every kernel configuration, for a zero gain (flagged,
// not silently wrong), and for the input's memory, freed once the caller drops it.
// Dimension letters: N rows, C columns.
#include "tests/lib/ops/norm_test_util.h"

namespace ft {
namespace {

using namespace ft::test;

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


TEST(NormTest, ActDropoutGradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck(norm_act_dropout({Activation::GELU, 0.25}),
                        {random_tensor({3, 6}, DType::F64, kCPU, gen), uniform_tensor({6}, DType::F64, kCPU, gen, 0.5, 1.5),
                         random_tensor({6}, DType::F64, kCPU, gen)},
                        gen));
}

}  // namespace
}  // namespace ft
