// cross_entropy with CrossEntropyOptions (ignore_index, reduction, label_smoothing): fused on
// CUDA (one pass that also writes dlogits; backward scales them by the upstream gradient in
// place), composite elsewhere. Checked against a reference written here in doubles, a gradient
// check of the label-smoothed twin, every device and kernel mode against the CPU f64 reference
// (forward and gradient, f32 and bf16, V up to 50257), and the fused path against the twin.
// Also: ignored rows, upstream gradients other than 1, backward twice, logits left intact, and
// out-of-range targets (an ft::Error at the call on the CPU, at the next read on CUDA).
// Dimension letters: N rows, V classes.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/cross_entropy/cross_entropy.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

/// Label-smoothed cross-entropy in doubles: lse − (1 − ε)·row[target] − ε·mean(row), ignored
/// rows left out; the mean over counted rows (NaN when none) or their sum.
double reference_cross_entropy(const std::vector<double>& logits, const std::vector<double>& targets, int64_t vocab,
                               const CrossEntropyOptions& options) {
  double total = 0.0;
  int64_t counted = 0;
  const double eps = options.label_smoothing;
  for (size_t r = 0; r < targets.size(); ++r) {
    const int64_t t = static_cast<int64_t>(targets[r]);
    if (t == options.ignore_index) continue;
    const double* row = logits.data() + r * static_cast<size_t>(vocab);
    double m = -std::numeric_limits<double>::infinity(), row_sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) m = std::max(m, row[j]), row_sum += row[j];
    double s = 0.0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(row[j] - m);
    total += m + std::log(s) - (1.0 - eps) * row[t] - eps * row_sum / static_cast<double>(vocab);
    ++counted;
  }
  if (options.reduction == Reduction::Sum) return total;
  return counted ? total / static_cast<double>(counted) : std::numeric_limits<double>::quiet_NaN();
}

/// Targets in [0, vocab) with every third row (rows 1, 4, 7, ...) set to ignore_index.
Tensor targets_with_ignored(int64_t n, int64_t vocab, int64_t ignore_index, DType dtype, Generator& gen) {
  std::vector<double> t = random_ids({n}, vocab, DType::I64, kCPU, gen).to_vector();
  for (size_t i = 1; i < t.size(); i += 3) t[i] = static_cast<double>(ignore_index);
  return Tensor::from_vector(t, {n}, dtype);
}

std::string options_name(const CrossEntropyOptions& o) {
  return std::string(o.reduction == Reduction::Sum ? "sum" : "mean") + " ignore " + std::to_string(o.ignore_index) +
         " smoothing " + std::to_string(o.label_smoothing);
}

TensorFn ce_fn(const CrossEntropyOptions& options) {
  return [options](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], options); };
}

struct CeCase {
  int64_t n, vocab;
  DType ids = DType::I64;
};

// N = 1 (tiny and GPT-2-sized V), odd N and V, large rows (V = 8192), a GPT-2 vocabulary over
// several rows, many rows, and enough block rows (2048) that the last block adds the blocks'
// sums four loads at a time. Tiny vocabularies (a thread a row): the MLP's classifier (4096 rows,
// each block counting the i32 targets itself), more rows than that fold takes (the count
// kernel), and the largest tiny V next to the smallest warp-row one.
std::vector<CeCase> device_cases() {
  return {{1, 3},      {1, 50257},  {33, 767},           {4, 8192},   {8, 50257},
          {129, 1000}, {2048, 1025}, {4096, 10, DType::I32}, {20001, 10}, {300, 32, DType::I32},
          {65, 33}};
}

std::vector<CrossEntropyOptions> device_options() {
  std::vector<CrossEntropyOptions> out;
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum})
    for (double eps : {0.0, 0.1}) out.push_back({.ignore_index = -100, .reduction = reduction, .label_smoothing = eps});
  return out;
}

// ---- the CPU

TEST(CrossEntropyFusedTest, CpuF64MatchesReferenceWithLabelSmoothing) {
  Generator gen = test_generator();
  for (auto [n, vocab] : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {7, 5}, {33, 257}, {4, 1}}) {
    for (DType id_dtype : {DType::I64, DType::I32}) {
      for (int64_t ignore : {int64_t{-100}, int64_t{0}}) {  // ignore_index may also be a valid class
        for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
          for (double eps : {0.0, 0.1, 0.3}) {
            const CrossEntropyOptions options{.ignore_index = ignore, .reduction = reduction, .label_smoothing = eps};
            SCOPED_TRACE(testing::Message()
                         << "n " << n << " V " << vocab << " " << dtype_name(id_dtype) << " " << options_name(options));
            const Tensor logits = affine(random_tensor({n, vocab}, DType::F64, kCPU, gen), 3.0, 0.0);
            const Tensor targets = targets_with_ignored(n, vocab, ignore, id_dtype, gen);
            const Tensor loss = cross_entropy(logits, targets, options);
            EXPECT_EQ(loss.shape(), Shape{});
            EXPECT_EQ(loss.dtype(), DType::F64);
            const double expected = reference_cross_entropy(logits.to_vector(), targets.to_vector(), vocab, options);
            if (std::isnan(expected))  // every row ignored (V = 1 with ignore_index 0): mean is NaN
              EXPECT_TRUE(std::isnan(loss.item()));
            else
              EXPECT_NEAR(loss.item(), expected, 1e-12 * std::max(1.0, std::abs(expected)));
          }
        }
      }
    }
  }
}

// Full smoothing (ε = 1) ignores the target: the loss is lse − mean(row) for every target.
TEST(CrossEntropyFusedTest, FullSmoothingIgnoresTheTarget) {
  Generator gen = test_generator();
  const Tensor logits = random_tensor({5, 11}, DType::F64, kCPU, gen);
  const CrossEntropyOptions options{.label_smoothing = 1.0};
  const double a = cross_entropy(logits, random_ids({5}, 11, DType::I64, kCPU, gen), options).item();
  const double b = cross_entropy(logits, Tensor::zeros({5}, DType::I64), options).item();
  EXPECT_NEAR(a, b, 1e-13);
}

TEST(CrossEntropyFusedTest, Contracts) {
  const Tensor logits = Tensor::zeros({3, 4}, DType::F64);
  const Tensor targets = Tensor::from_vector({0, 1, 2}, {3}, DType::I64);
  EXPECT_FT_ERROR(cross_entropy(logits, targets, {.label_smoothing = 1.5}), "label_smoothing");
  EXPECT_FT_ERROR(cross_entropy(logits, targets, {.label_smoothing = -0.1}), "label_smoothing");
  EXPECT_FT_ERROR(cross_entropy(Tensor::zeros({3, 2, 4}, DType::F64), targets), "cross_entropy");
  EXPECT_FT_ERROR(cross_entropy(logits, targets.reshape({3, 1})), "cross_entropy");
  // ignore_index is the one value outside [0, V) allowed, whatever it is.
  EXPECT_NO_THROW(cross_entropy(logits, Tensor::from_vector({0, 7, 2}, {3}, DType::I64), {.ignore_index = 7}));
  EXPECT_FT_ERROR(cross_entropy(logits, Tensor::from_vector({0, 7, 2}, {3}, DType::I64), {.ignore_index = 6}),
                  "target");
}

TEST(CrossEntropyFusedTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  const Tensor logits = random_tensor({37, 65}, DType::F64, kCPU, gen);
  const Tensor targets = targets_with_ignored(37, 65, -100, DType::I64, gen);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    KernelModeGuard guard(mode);
    for (const CrossEntropyOptions& options : device_options())
      EXPECT_TRUE(all_equal(cross_entropy(logits, targets, options), cross_entropy_composite(logits, targets, options)))
          << kernel_mode_name(mode) << " " << options_name(options);
  }
}

TEST(CrossEntropyFusedTest, GradCheckF64LabelSmoothing) {
  Generator gen = test_generator();
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
    for (int64_t ignore : {int64_t{-100}, int64_t{2}}) {
      for (double eps : {0.1, 0.25}) {
        const CrossEntropyOptions options{.ignore_index = ignore, .reduction = reduction, .label_smoothing = eps};
        SCOPED_TRACE(options_name(options));
        const Tensor targets = targets_with_ignored(6, 5, ignore, DType::I64, gen);
        EXPECT_TRUE(
            gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy_composite(in[0], in[1], options); },
                      {affine(random_tensor({6, 5}, DType::F64, kCPU, gen), 2.0, 0.0), targets}, gen));
      }
    }
  }
}

// ---- every device and kernel mode

class CrossEntropyFusedDeviceTest : public DeviceModeTest {
 protected:
  /// Loss and logits gradient (upstream 1) on this device, from f64 CPU logits.
  GradRun run(const Tensor& logits, const Tensor& targets, DType dtype, const CrossEntropyOptions& options,
              double upstream = 1.0) {
    return run_with_grads(ce_fn(options), {logits, targets}, dtype, device(), Tensor::full({}, upstream, DType::F64));
  }
};

TEST_P(CrossEntropyFusedDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const CeCase& c : device_cases()) {
      for (const CrossEntropyOptions& options : device_options()) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " N " << c.n << " V " << c.vocab << " "
                                        << options_name(options));
        const Tensor targets = targets_with_ignored(c.n, c.vocab, options.ignore_index, c.ids, gen);
        EXPECT_TRUE(matches_f64_reference(ce_fn(options),
                                          {random_tensor({c.n, c.vocab}, DType::F64, kCPU, gen), targets}, device(),
                                          dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)));
      }
    }
  }
}

TEST_P(CrossEntropyFusedDeviceTest, LossDtypeAndShape) {
  for (DType dtype : fused_dtypes()) {
    const Tensor loss =
        cross_entropy(Tensor::zeros({2, 4}, dtype, device()), Tensor::from_vector({1, 3}, {2}, DType::I64, device()));
    EXPECT_EQ(loss.shape(), Shape{});
    EXPECT_EQ(loss.dtype(), DType::F32) << dtype_name(dtype);
    EXPECT_EQ(loss.device(), device());
    EXPECT_NEAR(loss.item(), std::log(4.0), 1e-6);  // uniform logits: log V
  }
}

// Rows whose target is ignore_index count for nothing: the loss and the other rows' gradients
// equal those of the batch without them (the mean divides by the counted rows), and their own
// gradient rows are exactly zero. ignore_index 5 is also a valid class.
TEST_P(CrossEntropyFusedDeviceTest, IgnoredRowsContributeNothingAndGetZeroGradient) {
  Generator gen = test_generator();
  const int64_t n = 37, vocab = 767;
  for (DType dtype : fused_dtypes()) {
    for (int64_t ignore : {int64_t{-100}, int64_t{5}}) {
      for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
        for (double eps : {0.0, 0.1}) {
          const CrossEntropyOptions options{.ignore_index = ignore, .reduction = reduction, .label_smoothing = eps};
          SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << options_name(options));
          const Tensor logits = random_tensor({n, vocab}, DType::F64, kCPU, gen);
          const Tensor targets = targets_with_ignored(n, vocab, ignore, DType::I64, gen);
          // The counted rows alone.
          std::vector<double> lv = logits.to_vector(), tv = targets.to_vector(), kept_logits, kept_targets;
          std::vector<bool> ignored(static_cast<size_t>(n));
          for (int64_t r = 0; r < n; ++r) {
            ignored[static_cast<size_t>(r)] = static_cast<int64_t>(tv[static_cast<size_t>(r)]) == ignore;
            if (ignored[static_cast<size_t>(r)]) continue;
            kept_targets.push_back(tv[static_cast<size_t>(r)]);
            kept_logits.insert(kept_logits.end(), lv.begin() + r * vocab, lv.begin() + (r + 1) * vocab);
          }
          const int64_t kept = static_cast<int64_t>(kept_targets.size());
          ASSERT_GT(kept, 0);
          ASSERT_LT(kept, n);
          const GradRun all = run(logits, targets, dtype, options);
          const GradRun sub = run(Tensor::from_vector(kept_logits, {kept, vocab}, DType::F64),
                                  Tensor::from_vector(kept_targets, {kept}, DType::I64), dtype, options);
          EXPECT_TRUE(all_close(all.y, sub.y, forward_tolerance(dtype))) << "loss";
          const std::vector<double> g = all.grads[0].to_vector();
          std::vector<double> g_kept, g_ignored;
          for (int64_t r = 0; r < n; ++r) {
            std::vector<double>& to = ignored[static_cast<size_t>(r)] ? g_ignored : g_kept;
            to.insert(to.end(), g.begin() + r * vocab, g.begin() + (r + 1) * vocab);
          }
          for (size_t i = 0; i < g_ignored.size(); ++i) ASSERT_EQ(g_ignored[i], 0.0) << "ignored rows, element " << i;
          EXPECT_TRUE(
              all_close(Tensor::from_vector(g_kept, {kept, vocab}, DType::F64), sub.grads[0], grad_tolerance(dtype)))
              << "counted rows' gradient";
        }
      }
    }
  }
}

// Also with V = 10 over two blocks of thread rows, which count the targets themselves.
TEST_P(CrossEntropyFusedDeviceTest, AllRowsIgnored) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (auto [n, vocab] : std::vector<std::pair<int64_t, int64_t>>{{3, 767}, {300, 10}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " N " << n << " V " << vocab);
      const Tensor logits = random_tensor({n, vocab}, DType::F64, kCPU, gen);
      const Tensor targets = Tensor::full({n}, -100.0, DType::I64);
      EXPECT_TRUE(std::isnan(run(logits, targets, dtype, {}).y.item())) << "mean over no rows";
      const GradRun sum = run(logits, targets, dtype, {.reduction = Reduction::Sum, .label_smoothing = 0.1});
      EXPECT_EQ(sum.y.item(), 0.0);
      EXPECT_TRUE(all_equal(sum.grads[0], Tensor::zeros({n, vocab}, dtype)));
    }
  }
}

// The fused backward scales dlogits by the upstream gradient in place, and skips the kernel
// when it is 1: the gradient must follow the upstream gradient, whatever it is.
TEST_P(CrossEntropyFusedDeviceTest, UpstreamGradientScalesTheGradient) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const CrossEntropyOptions& options : device_options()) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << options_name(options));
      const Tensor logits = random_tensor({33, 767}, DType::F64, kCPU, gen);
      const Tensor targets = targets_with_ignored(33, 767, -100, DType::I64, gen);
      const GradRun one = run(logits, targets, dtype, options);
      for (double k : {3.0, -0.5, 0.0, 1.0}) {
        Tensor leaf = fresh_leaf(logits, dtype, device());
        const Tensor loss = cross_entropy(leaf, fresh_copy(targets, DType::I64, device()), options);
        (loss * k).backward();
        ASSERT_TRUE(leaf.grad().defined());
        // round(k·g) against k·round(g): two roundings apart at most, within the forward budget.
        EXPECT_TRUE(all_close(leaf.grad(), fresh_copy(one.grads[0], DType::F64, kCPU) * k, forward_tolerance(dtype)))
            << "(loss · " << k << ")";
      }
      // Two uses of the loss: the upstream gradients add up to 3 before the op's backward runs.
      Tensor leaf = fresh_leaf(logits, dtype, device());
      const Tensor loss = cross_entropy(leaf, fresh_copy(targets, DType::I64, device()), options);
      (loss + loss * 2.0).backward();
      EXPECT_TRUE(all_close(leaf.grad(), fresh_copy(one.grads[0], DType::F64, kCPU) * 3.0, forward_tolerance(dtype)))
          << "loss + 2 · loss";
    }
  }
}

// Backward twice through a retained graph adds the gradient twice. The fused op computes
// dlogits in forward and scales them in place in backward, so it may instead refuse the second
// pass with an ft::Error that says retain_graph is not supported; what it must never do is
// scale its saved buffer twice and return a wrong gradient silently.
TEST_P(CrossEntropyFusedDeviceTest, BackwardTwiceWithRetainedGraphAccumulatesOrRefuses) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor logits = random_tensor({33, 767}, DType::F64, kCPU, gen);
    const Tensor targets = targets_with_ignored(33, 767, -100, DType::I64, gen);
    const GradRun one = run(logits, targets, dtype, {.label_smoothing = 0.1});
    const Tensor expected = fresh_copy(one.grads[0], DType::F64, kCPU);
    for (double k : {1.0, 3.0}) {
      Tensor leaf = fresh_leaf(logits, dtype, device());
      const Tensor loss = cross_entropy(leaf, fresh_copy(targets, DType::I64, device()), {.label_smoothing = 0.1}) * k;
      loss.backward(Tensor(), /*retain_graph=*/true);
      EXPECT_TRUE(all_close(leaf.grad(), expected * k, forward_tolerance(dtype))) << "first pass, upstream " << k;
      bool refused = false;
      try {
        loss.backward();
      } catch (const Error& e) {
        refused = true;
        EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
      }
      EXPECT_FALSE(refused && device().is_cpu()) << "the CPU twin supports retain_graph";
      EXPECT_TRUE(all_close(leaf.grad(), expected * (refused ? k : 2.0 * k), grad_tolerance(dtype)))
          << "upstream " << k << (refused ? " (second pass refused)" : " (two passes)");
    }
  }
}

// dlogits may be written over the logits' storage only when nothing else reads them: logits
// that another op saved for its backward (here y · y) and the caller's tensor stay intact.
TEST_P(CrossEntropyFusedDeviceTest, LogitsUsedElsewhereAreLeftIntact) {
  Generator gen = test_generator();
  const int64_t n = 33, vocab = 767;
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor targets = targets_with_ignored(n, vocab, -100, DType::I64, gen);
    EXPECT_TRUE(matches_f64_reference(
        [](const std::vector<Tensor>& in) {
          const Tensor y = in[0] * 1.5;
          const Tensor ce = cross_entropy(y, in[1]);  // f32 for bf16 logits
          return ce + cast(sum_all(y * y), ce.dtype()) * 1e-3;
        },
        {random_tensor({n, vocab}, DType::F64, kCPU, gen), targets}, device(), dtype, gen, forward_tolerance(dtype),
        grad_tolerance(dtype)));
    // The caller's logits, leaf or not, read the same after forward and backward.
    Tensor leaf = fresh_leaf(random_tensor({n, vocab}, DType::F64, kCPU, gen), dtype, device());
    const Tensor y = leaf * 2.0;
    const std::vector<double> leaf_before = leaf.to_vector(), y_before = y.to_vector();
    const Tensor loss = cross_entropy(y, fresh_copy(targets, DType::I64, device())) +
                        cross_entropy(leaf, fresh_copy(targets, DType::I64, device()));
    EXPECT_EQ(leaf.to_vector(), leaf_before);
    EXPECT_EQ(y.to_vector(), y_before);
    loss.backward();
    EXPECT_EQ(leaf.to_vector(), leaf_before);
    EXPECT_EQ(y.to_vector(), y_before);
  }
}

// Logits near 1000 stay finite. lse ≈ 1000 is rounded in f32 (an ulp of 1000 is 6e-5) before
// the target logit is subtracted, so the loss (about log V) carries an absolute error of a few
// ulps of 1000, and exp(x − lse) a relative one of the same size: a tolerance of 1e-3, far above
// the usual f32 1e-5 (relative) but far below any real error.
TEST_P(CrossEntropyFusedDeviceTest, LargeLogitsStayFinite) {
  Generator gen = test_generator();
  const int64_t n = 9, vocab = 767;
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor logits = fresh_copy(affine(random_tensor({n, vocab}, DType::F64, kCPU, gen), 1.0, 1000.0), dtype, kCPU)
                              .to(DType::F64);  // exactly representable in dtype
    const Tensor targets = random_ids({n}, vocab, DType::I64, kCPU, gen);
    const GradRun r = run(logits, targets, dtype, {});
    ASSERT_TRUE(std::isfinite(r.y.item()));
    const Tensor leaf = fresh_leaf(logits, DType::F64, kCPU);
    const Tensor ref = cross_entropy(leaf, targets);
    ref.backward();
    EXPECT_NEAR(r.y.item(), ref.item(), 1e-3);
    EXPECT_TRUE(all_close(r.grads[0], leaf.grad(), std::max(1e-3, grad_tolerance(dtype))));
  }
}

// An out-of-range target that is not ignore_index: an ft::Error at the call on the CPU, and at
// the next synchronizing read on CUDA, in either kernel mode, with or without a gradient.
// V = 10 takes the thread-a-row kernel that counts the targets itself; its bad row lies in the
// third block.
TEST_P(CrossEntropyFusedDeviceTest, TargetOutOfRangeIsAnError) {
  for (auto [rows, vocab] : std::vector<std::pair<int64_t, int64_t>>{{3, 767}, {600, 10}}) {
    const size_t bad_row = rows == 3 ? 1 : 519;
    for (bool with_grad : {false, true}) {
      for (const CrossEntropyOptions& options : device_options()) {
        for (double bad : {static_cast<double>(vocab), -1.0, 1e6}) {
          SCOPED_TRACE(testing::Message() << "V " << vocab << " " << options_name(options) << " target " << bad
                                          << (with_grad ? " grad" : ""));
          Tensor logits = Tensor::zeros({rows, vocab}, DType::F32, device());
          if (with_grad) logits.requires_grad_();
          std::vector<double> ids(static_cast<size_t>(rows), 1.0);
          ids[0] = 0.0;
          ids[bad_row] = bad;
          const Tensor targets = Tensor::from_vector(ids, {rows}, DType::I64, device());
          if (device().is_cpu()) {
            EXPECT_FT_ERROR(cross_entropy(logits, targets, options), "cross_entropy");
            continue;
          }
          Tensor loss;
          EXPECT_NO_THROW(loss = cross_entropy(logits, targets, options));  // the check runs on the device
          EXPECT_TRUE(error_mentions([&] { loss.item(); }, "cross_entropy"));
          EXPECT_NO_THROW(synchronize());  // raised once, then cleared: the device stays usable
          ids[bad_row] = -100.0;
          const Tensor good = cross_entropy(logits, Tensor::from_vector(ids, {rows}, DType::I64, device()), options);
          EXPECT_NO_THROW(good.item());
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CrossEntropyFusedDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// ---- the fused CUDA path against its twin

TEST(CrossEntropyFusedVsTwinTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    for (const CeCase& c : device_cases()) {
      for (const CrossEntropyOptions& options : device_options()) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " N " << c.n << " V " << c.vocab << " "
                                        << options_name(options));
        const Tensor targets = targets_with_ignored(c.n, c.vocab, -100, DType::I64, gen);
        EXPECT_TRUE(fused_matches_twin(ce_fn(options), {random_tensor({c.n, c.vocab}, DType::F64, kCPU, gen), targets},
                                       dtype, gen, grad_tolerance(dtype)));
      }
    }
  }
}

TEST(CrossEntropyFusedVsTwinTest, FusedModeRecordsFewerNodesOnCudaOnly) {
  Generator gen = test_generator();
  const Tensor logits = random_tensor({37, 65}, DType::F64, kCPU, gen);
  const Tensor targets = random_ids({37}, 65, DType::I64, kCPU, gen);
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    const Tensor leaf = fresh_leaf(logits, DType::F32, device), t = fresh_copy(targets, DType::I64, device);
    size_t sizes[2];
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
      sizes[fused] = graph_size(cross_entropy(leaf, t, {.label_smoothing = 0.1}));
    }
    EXPECT_GT(sizes[1], 0u) << device.str();
    if (device.is_cuda())
      EXPECT_LT(sizes[1], sizes[0]);
    else
      EXPECT_EQ(sizes[1], sizes[0]);
  }
}

// backward() with no gradient starts from a cached ones tensor, which the fused kernel may leave
// unapplied: its gradients must equal those of an explicit upstream of exactly 1 (which goes
// through the scaling) bit for bit, and an explicit ones tensor is not mistaken for the seed.
TEST(CrossEntropyFusedVsTwinTest, ImplicitSeedGivesTheGradientOfAnExplicitOne) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard guard(KernelMode::Fused);
  Generator gen = test_generator();
  const Tensor logits = random_tensor({64, 10}, DType::F64, kCPU, gen);
  const Tensor targets = fresh_copy(random_ids({64}, 10, DType::I64, kCPU, gen), DType::I64, kCUDA);
  std::vector<double> grads[2];
  for (int explicit_one = 0; explicit_one < 2; ++explicit_one) {
    for (int repeat = 0; repeat < 2; ++repeat) {  // the second backward() reuses the cached seed
      const Tensor leaf = fresh_leaf(logits, DType::BF16, kCUDA);
      const Tensor loss = cross_entropy(leaf, targets);
      const Tensor one = Tensor::full(loss.shape(), 1.0, loss.dtype(), kCUDA);
      EXPECT_FALSE(is_unit_seed(one));
      if (explicit_one) loss.backward(one);
      else loss.backward();
      grads[explicit_one] = leaf.grad().to_vector();
    }
  }
  EXPECT_EQ(grads[0], grads[1]);
  const Tensor loss = cross_entropy(fresh_leaf(logits, DType::BF16, kCUDA), targets);
  EXPECT_TRUE(is_unit_seed(seed_gradient(loss, Tensor(), "test")));
}

// f64 has no fused kernel: on CUDA in fused mode it runs the twin and still matches the CPU.
TEST(CrossEntropyFusedVsTwinTest, F64OnCudaRunsTheTwin) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard guard(KernelMode::Fused);
  Generator gen = test_generator();
  for (const CrossEntropyOptions& options : device_options()) {
    SCOPED_TRACE(options_name(options));
    EXPECT_TRUE(matches_f64_reference(
        ce_fn(options),
        {random_tensor({33, 767}, DType::F64, kCPU, gen), targets_with_ignored(33, 767, -100, DType::I64, gen)}, kCUDA,
        DType::F64, gen, forward_tolerance(DType::F64), grad_tolerance(DType::F64)));
  }
}

}  // namespace
}  // namespace ft
