// The norms' fused CUDA path against its twin on the same inputs, and its kernels called directly
// (norm_cuda.h): node counts, the column sums of dx, odd widths, the input freed early. CUDA tests:
// compiled only in a CUDA build, they skip without a GPU. Dimension letters: N rows, C columns.
#include "lib/ops/norm/norm_cuda.h"
#include "tests/lib/ops/norm_test_util.h"

namespace ft {
namespace {

using namespace ft::test;

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
