// linear_cross_entropy(x, W, targets) = cross_entropy(x·Wᵀ, targets), fused on CUDA in chunks
// of rows (the gradients are computed during forward; backward scales them by the upstream
// gradient), composite elsewhere. The loss and the gradients of x and W must match the twin on
// CUDA (fused vs unfused) and the CPU f64 reference, for chunk sizes smaller than N and not
// dividing it, equal to it and larger; and the fused path must need less memory than the twin,
// which materializes the [N, V] logits. Dimension letters: N rows, C features, V classes.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lib/ops/linear_cross_entropy/linear_cross_entropy.h"
#include "lib/ops/matmul/matmul.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

#include "lib/runtime.h"

namespace ft {
namespace {

using namespace ft::test;

/// cross_entropy(x·Wᵀ) in doubles, label smoothing and ignore_index included.
double reference_linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets,
                                      const CrossEntropyOptions& options) {
  const int64_t n = x.size(0), c = x.size(1), vocab = w.size(0);
  const std::vector<double> vx = x.to_vector(), vw = w.to_vector(), vt = targets.to_vector();
  std::vector<double> row(static_cast<size_t>(vocab));
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = static_cast<int64_t>(vt[static_cast<size_t>(r)]);
    if (t == options.ignore_index) continue;
    double m = -std::numeric_limits<double>::infinity(), row_sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) {
      double acc = 0.0;
      for (int64_t k = 0; k < c; ++k) acc += vx[static_cast<size_t>(r * c + k)] * vw[static_cast<size_t>(v * c + k)];
      row[static_cast<size_t>(v)] = acc;
      m = std::max(m, acc);
      row_sum += acc;
    }
    double s = 0.0;
    for (double l : row) s += std::exp(l - m);
    const double eps = options.label_smoothing;
    total += m + std::log(s) - (1.0 - eps) * row[static_cast<size_t>(t)] - eps * row_sum / static_cast<double>(vocab);
    ++counted;
  }
  if (options.reduction == Reduction::Sum) return total;
  return counted ? total / static_cast<double>(counted) : std::numeric_limits<double>::quiet_NaN();
}

struct LceCase {
  int64_t n, c, vocab, chunk_rows;
};

std::string case_name(const LceCase& k) {
  return "N " + std::to_string(k.n) + " C " + std::to_string(k.c) + " V " + std::to_string(k.vocab) + " chunk " +
         std::to_string(k.chunk_rows);
}

std::string options_name(const CrossEntropyOptions& o) {
  return std::string(o.reduction == Reduction::Sum ? "sum" : "mean") + " ignore " + std::to_string(o.ignore_index) +
         " smoothing " + std::to_string(o.label_smoothing);
}

// Chunks smaller than N and not dividing it (37 = 16 + 16 + 5, and 7 chunks of one row), equal
// to N, larger than N (the default 4096), N = 1 with a GPT-2 vocabulary, odd V, large V, and a
// tiny V (10: the loss kernel's thread rows, given the batch's count, adding over the chunks).
std::vector<LceCase> device_cases() {
  return {{37, 64, 767, 16},  {7, 64, 767, 1},    {37, 65, 767, 37},  {37, 64, 767, 4096},
          {1, 64, 50257, 16}, {8, 64, 50257, 3}, {64, 64, 8192, 16}, {37, 64, 10, 16}};
}

std::vector<CrossEntropyOptions> device_options() {
  std::vector<CrossEntropyOptions> out;
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum})
    for (double eps : {0.0, 0.1}) out.push_back({.ignore_index = -100, .reduction = reduction, .label_smoothing = eps});
  return out;
}

/// Targets in [0, vocab) with every third row (1, 4, 7, ...) set to ignore_index.
Tensor targets_with_ignored(int64_t n, int64_t vocab, int64_t ignore_index, Generator& gen) {
  std::vector<double> t = random_ids({n}, vocab, DType::I64, kCPU, gen).to_vector();
  for (size_t i = 1; i < t.size(); i += 3) t[i] = static_cast<double>(ignore_index);
  return Tensor::from_vector(t, {n}, DType::I64);
}

/// x, W (scaled by 1/√C, so the logits are of order one) and targets.
std::vector<Tensor> lce_inputs(const LceCase& k, const CrossEntropyOptions& options, Generator& gen) {
  return {random_tensor({k.n, k.c}, DType::F64, kCPU, gen),
          affine(random_tensor({k.vocab, k.c}, DType::F64, kCPU, gen), 1.0 / std::sqrt(static_cast<double>(k.c)), 0.0),
          targets_with_ignored(k.n, k.vocab, options.ignore_index, gen)};
}

TensorFn lce_fn(const CrossEntropyOptions& options, int64_t chunk_rows) {
  return [options, chunk_rows](const std::vector<Tensor>& in) {
    return linear_cross_entropy(in[0], in[1], in[2], options, chunk_rows);
  };
}

// ---- the CPU

TEST(LinearCrossEntropyTest, CpuF64MatchesReference) {
  Generator gen = test_generator();
  for (const LceCase& k : {LceCase{37, 65, 767, 16}, LceCase{1, 64, 3, 4096}, LceCase{5, 16, 50257, 2}}) {
    for (const CrossEntropyOptions& options : device_options()) {
      SCOPED_TRACE(case_name(k) + " " + options_name(options));
      const std::vector<Tensor> in = lce_inputs(k, options, gen);
      const Tensor loss = linear_cross_entropy(in[0], in[1], in[2], options, k.chunk_rows);
      EXPECT_EQ(loss.shape(), Shape{});
      EXPECT_EQ(loss.dtype(), DType::F64);
      const double expected = reference_linear_cross_entropy(in[0], in[1], in[2], options);
      EXPECT_NEAR(loss.item(), expected, 1e-12 * std::max(1.0, std::abs(expected)));
    }
  }
}

// The CPU always runs the composite twin, whatever the kernel mode and the chunk size; and the
// twin is matmul + cross_entropy.
TEST(LinearCrossEntropyTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  const LceCase k{37, 65, 767, 16};
  for (const CrossEntropyOptions& options : device_options()) {
    const std::vector<Tensor> in = lce_inputs(k, options, gen);
    const Tensor twin = linear_cross_entropy_composite(in[0], in[1], in[2], options);
    EXPECT_TRUE(all_close(twin, cross_entropy(matmul(in[0], in[1], false, true), in[2], options), 1e-14));
    for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
      KernelModeGuard guard(mode);
      for (int64_t chunk : {int64_t{1}, int64_t{16}, int64_t{4096}})
        EXPECT_TRUE(all_equal(linear_cross_entropy(in[0], in[1], in[2], options, chunk), twin))
            << kernel_mode_name(mode) << " chunk " << chunk << " " << options_name(options);
    }
  }
}

TEST(LinearCrossEntropyTest, GradCheckF64) {
  Generator gen = test_generator();
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
    for (double eps : {0.0, 0.1}) {
      for (int64_t ignore : {int64_t{-100}, int64_t{2}}) {
        const CrossEntropyOptions options{.ignore_index = ignore, .reduction = reduction, .label_smoothing = eps};
        SCOPED_TRACE(options_name(options));
        EXPECT_TRUE(gradcheck(
            [&](const std::vector<Tensor>& in) { return linear_cross_entropy_composite(in[0], in[1], in[2], options); },
            lce_inputs({5, 4, 7, 2}, options, gen), gen));
        // The public function too (on the CPU it is the twin, chunk size or not).
        EXPECT_TRUE(gradcheck(lce_fn(options, 2), lce_inputs({5, 4, 7, 2}, options, gen), gen));
      }
    }
  }
}

TEST(LinearCrossEntropyTest, Contracts) {
  const Tensor x = Tensor::zeros({4, 6}), w = Tensor::zeros({9, 6});
  const Tensor t = Tensor::from_vector({0, 1, 2, 3}, {4}, DType::I64);
  EXPECT_FT_ERROR(linear_cross_entropy(x, Tensor::zeros({9, 5}), t), "linear_cross_entropy");
  EXPECT_FT_ERROR(linear_cross_entropy(Tensor::zeros({2, 2, 6}), w, t), "linear_cross_entropy");
  EXPECT_FT_ERROR(linear_cross_entropy(x, w, Tensor::from_vector({0, 1, 2}, {3}, DType::I64)), "linear_cross_entropy");
  EXPECT_FT_ERROR(linear_cross_entropy(x, w, Tensor::from_vector({0, 1, 2, 3}, {4}, DType::F32)),
                  "linear_cross_entropy");
  EXPECT_FT_ERROR(linear_cross_entropy(x, w, Tensor::from_vector({0, 9, 2, 3}, {4}, DType::I64)), "target");
  EXPECT_NO_THROW(linear_cross_entropy(x, w, Tensor::from_vector({0, -100, 2, 3}, {4}, DType::I64)));
  EXPECT_FT_ERROR(linear_cross_entropy(x, w, t, {}, 0), "chunk_rows");
  EXPECT_FT_ERROR(linear_cross_entropy(x, Tensor::zeros({9, 6}, DType::F64), t), "linear_cross_entropy");
}

// ---- every device and kernel mode against the CPU f64 reference

class LinearCrossEntropyDeviceTest : public DeviceModeTest {};

TEST_P(LinearCrossEntropyDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const LceCase& k : device_cases()) {
      for (const CrossEntropyOptions& options : device_options()) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(k) + " " + options_name(options));
        EXPECT_TRUE(matches_f64_reference(lce_fn(options, k.chunk_rows), lce_inputs(k, options, gen), device(), dtype,
                                          gen, forward_tolerance(dtype), grad_tolerance(dtype)));
      }
    }
  }
}

// Only x, or only W, needs a gradient (a frozen head, or embeddings tied elsewhere).
TEST_P(LinearCrossEntropyDeviceTest, PartialGradientsMatchF64Reference) {
  Generator gen = test_generator();
  const LceCase k{37, 64, 767, 16};
  for (DType dtype : fused_dtypes()) {
    for (const std::vector<bool>& wrt :
         {std::vector<bool>{true, false, false}, std::vector<bool>{false, true, false}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " wrt " << wrt[0] << wrt[1]);
      EXPECT_TRUE(matches_f64_reference(lce_fn({}, k.chunk_rows), lce_inputs(k, {}, gen), device(), dtype, gen,
                                        forward_tolerance(dtype), grad_tolerance(dtype), wrt));
    }
  }
}

// Without a gradient (evaluation), forward alone gives the same loss and records nothing.
TEST_P(LinearCrossEntropyDeviceTest, NoGradForwardMatchesF64Reference) {
  Generator gen = test_generator();
  const LceCase k{37, 64, 767, 16};
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<Tensor> in = lce_inputs(k, {}, gen);
    const Tensor x = fresh_copy(in[0], dtype, device()), w = fresh_copy(in[1], dtype, device());
    Tensor loss;
    {
      NoGradGuard no_grad;
      loss = linear_cross_entropy(fresh_leaf(x, dtype, device()), fresh_leaf(w, dtype, device()),
                                  fresh_copy(in[2], DType::I64, device()), {}, k.chunk_rows);
    }
    EXPECT_FALSE(loss.requires_grad());
    const Tensor plain = linear_cross_entropy(x, w, fresh_copy(in[2], DType::I64, device()), {}, k.chunk_rows);
    EXPECT_FALSE(plain.requires_grad());
    const double expected =
        reference_linear_cross_entropy(fresh_copy(x, DType::F64, kCPU), fresh_copy(w, DType::F64, kCPU), in[2], {});
    EXPECT_NEAR(loss.item(), expected, forward_tolerance(dtype) * std::abs(expected) + 1e-6);
    EXPECT_NEAR(plain.item(), expected, forward_tolerance(dtype) * std::abs(expected) + 1e-6);
  }
}

// Ignored rows: their x gradient is exactly zero, and nothing of them reaches W's.
TEST_P(LinearCrossEntropyDeviceTest, IgnoredRowsGetZeroGradient) {
  Generator gen = test_generator();
  const LceCase k{37, 64, 767, 16};
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<Tensor> in = lce_inputs(k, {}, gen);
    const GradRun r = run_with_grads(lce_fn({}, k.chunk_rows), in, dtype, device(), Tensor::full({}, 1.0, DType::F64));
    const std::vector<double> dx = r.grads[0].to_vector(), t = in[2].to_vector();
    for (int64_t row = 0; row < k.n; ++row) {
      if (t[static_cast<size_t>(row)] != -100.0) continue;
      for (int64_t j = 0; j < k.c; ++j) ASSERT_EQ(dx[static_cast<size_t>(row * k.c + j)], 0.0) << "row " << row;
    }
    // Changing the ignored rows of x changes neither the loss nor W's gradient.
    std::vector<double> vx = in[0].to_vector();
    for (int64_t row = 1; row < k.n; row += 3)
      for (int64_t j = 0; j < k.c; ++j) vx[static_cast<size_t>(row * k.c + j)] += 10.0;
    const GradRun moved =
        run_with_grads(lce_fn({}, k.chunk_rows), {Tensor::from_vector(vx, {k.n, k.c}, DType::F64), in[1], in[2]}, dtype,
                       device(), Tensor::full({}, 1.0, DType::F64));
    EXPECT_TRUE(all_close(moved.y, r.y, forward_tolerance(dtype)));
    EXPECT_TRUE(all_close(moved.grads[1], r.grads[1], grad_tolerance(dtype)));
  }
}

// The gradients are made during forward; backward scales them by the upstream gradient.
TEST_P(LinearCrossEntropyDeviceTest, UpstreamGradientScalesTheGradients) {
  Generator gen = test_generator();
  const LceCase k{37, 64, 767, 16};
  for (DType dtype : fused_dtypes()) {
    for (const CrossEntropyOptions& options : device_options()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + options_name(options));
      const std::vector<Tensor> in = lce_inputs(k, options, gen);
      const GradRun one =
          run_with_grads(lce_fn(options, k.chunk_rows), in, dtype, device(), Tensor::full({}, 1.0, DType::F64));
      for (double scale : {3.0, -0.5, 0.0}) {
        const GradRun scaled =
            run_with_grads(lce_fn(options, k.chunk_rows), in, dtype, device(), Tensor::full({}, scale, DType::F64));
        for (int i = 0; i < 2; ++i)
          EXPECT_TRUE(
              all_close(scaled.grads[i], fresh_copy(one.grads[i], DType::F64, kCPU) * scale, forward_tolerance(dtype)))
              << (i ? "dW" : "dx") << ", upstream " << scale;
      }
      // Backward twice through a retained graph adds the gradients twice, or (fused: the
      // gradients are scaled in place) the second pass is refused with an ft::Error naming
      // retain_graph; never a silently wrong gradient.
      std::vector<Tensor> leaves{fresh_leaf(in[0], dtype, device()), fresh_leaf(in[1], dtype, device()),
                                 fresh_copy(in[2], DType::I64, device())};
      const Tensor loss = lce_fn(options, k.chunk_rows)(leaves) * 3.0;
      loss.backward(Tensor(), /*retain_graph=*/true);
      bool refused = false;
      try {
        loss.backward();
      } catch (const Error& e) {
        refused = true;
        EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
      }
      EXPECT_FALSE(refused && device().is_cpu()) << "the CPU twin supports retain_graph";
      for (int i = 0; i < 2; ++i)
        EXPECT_TRUE(all_close(leaves[static_cast<size_t>(i)].grad(),
                              fresh_copy(one.grads[i], DType::F64, kCPU) * (refused ? 3.0 : 6.0),
                              grad_tolerance(dtype)))
            << (i ? "dW" : "dx") << (refused ? ", one backward pass" : ", two backward passes") << " of 3 · loss";
    }
  }
}

// An out-of-range target: an ft::Error at the call on the CPU, at the next read on CUDA.
TEST_P(LinearCrossEntropyDeviceTest, TargetOutOfRangeIsAnError) {
  for (bool with_grad : {false, true}) {
    SCOPED_TRACE(with_grad ? "with gradient" : "no gradient");
    Tensor x = Tensor::zeros({3, 8}, DType::F32, device()), w = Tensor::zeros({5, 8}, DType::F32, device());
    if (with_grad) {
      x.requires_grad_();
      w.requires_grad_();
    }
    const Tensor bad = Tensor::from_vector({0, 5, 1}, {3}, DType::I64, device());
    if (device().is_cpu()) {
      EXPECT_FT_ERROR(linear_cross_entropy(x, w, bad, {}, 2), "target");
      continue;
    }
    Tensor loss;
    EXPECT_NO_THROW(loss = linear_cross_entropy(x, w, bad, {}, 2));
    EXPECT_TRUE(error_mentions([&] { loss.item(); }, "cross_entropy"));
    EXPECT_NO_THROW(synchronize());
    const Tensor good = linear_cross_entropy(x, w, Tensor::from_vector({0, -100, 4}, {3}, DType::I64, device()), {}, 2);
    EXPECT_NO_THROW(good.item());
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LinearCrossEntropyDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// ---- the fused CUDA path against its twin

TEST(LinearCrossEntropyFusedVsTwinTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const LceCase& k : device_cases()) {
      for (const CrossEntropyOptions& options : device_options()) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + case_name(k) + " " + options_name(options));
        EXPECT_TRUE(fused_matches_twin(lce_fn(options, k.chunk_rows), lce_inputs(k, options, gen), dtype, gen,
                                       grad_tolerance(dtype)));
      }
    }
  }
}

TEST(LinearCrossEntropyFusedVsTwinTest, FusedModeRecordsFewerNodesOnCudaOnly) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = lce_inputs({37, 64, 767, 16}, {}, gen);
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    const Tensor x = fresh_leaf(in[0], DType::F32, device), w = fresh_leaf(in[1], DType::F32, device);
    const Tensor t = fresh_copy(in[2], DType::I64, device);
    size_t sizes[2];
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
      sizes[fused] = graph_size(linear_cross_entropy(x, w, t, {}, 16));
    }
    EXPECT_GT(sizes[1], 0u) << device.str();
    if (device.is_cuda())
      EXPECT_LT(sizes[1], sizes[0]);
    else
      EXPECT_EQ(sizes[1], sizes[0]);
  }
}

// f64 has no fused kernel: on CUDA in fused mode it runs the twin and still matches the CPU.
TEST(LinearCrossEntropyFusedVsTwinTest, F64OnCudaRunsTheTwin) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard guard(KernelMode::Fused);
  Generator gen = test_generator();
  const LceCase k{37, 64, 767, 16};
  EXPECT_TRUE(matches_f64_reference(lce_fn({.label_smoothing = 0.1}, k.chunk_rows), lce_inputs(k, {}, gen), kCUDA,
                                    DType::F64, gen, forward_tolerance(DType::F64), grad_tolerance(DType::F64)));
}

// ---- memory

// The twin materializes [N, V] logits (and more of that size in cross_entropy's primitives);
// the fused path holds one chunk of logits plus dx and dW. Measured as the peak of device
// memory in use during forward and backward, above what was in use before (x, W, targets).
TEST(LinearCrossEntropyMemoryTest, FusedPeakIsBelowTheTwinsAndTheFullLogits) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  // Under a sanitizer (tests/lib/test_util.h) a 16x smaller problem: the twin's [N, V] passes
  // over 134M logits took longer than a device call under initcheck and synccheck.
  const bool small = under_sanitizer();
  const int64_t n = small ? 1024 : 4096, c = 256, vocab = small ? 8192 : 32768, chunk_rows = small ? 128 : 512;
  Generator gen = test_generator();
  const Tensor x = random_tensor({n, c}, DType::BF16, kCUDA, gen);
  const Tensor w = affine(random_tensor({vocab, c}, DType::BF16, kCUDA, gen), 1.0 / 16.0, 0.0);
  const Tensor targets = random_ids({n}, vocab, DType::I64, kCUDA, gen);
  double losses[2];
  auto extra_peak = [&](KernelMode mode) -> size_t {
    KernelModeGuard guard(mode);
    Tensor xl = fresh_leaf(x, DType::BF16, kCUDA), wl = fresh_leaf(w, DType::BF16, kCUDA);
    synchronize();
    const size_t before = device_memory_in_use();
    reset_peak_memory();
    {
      const Tensor loss = linear_cross_entropy(xl, wl, targets, {}, chunk_rows);
      loss.backward();
      losses[mode == KernelMode::Fused] = loss.item();
    }
    synchronize();
    const size_t peak = peak_memory();
    return peak > before ? peak - before : 0;
  };
  const size_t twin = extra_peak(KernelMode::Unfused);
  const size_t fused = extra_peak(KernelMode::Fused);
  const size_t full_logits = static_cast<size_t>(n * vocab) * dtype_size(DType::BF16);
  RecordProperty("twin_extra_peak_bytes", std::to_string(twin));
  RecordProperty("fused_extra_peak_bytes", std::to_string(fused));
  EXPECT_GE(twin, full_logits) << "the twin holds the [N, V] logits, or the counters miss allocations";
  EXPECT_LT(fused, full_logits) << "fused " << fused << " bytes, twin " << twin;
  EXPECT_LT(fused, twin / 2) << "fused " << fused << " bytes, twin " << twin;
  EXPECT_NEAR(losses[1], losses[0], 1e-2 * std::abs(losses[0]));
}

}  // namespace
}  // namespace ft
