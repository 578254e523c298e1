// embedding_bag and its row primitives: the pooled rows against loops in f64 (sum, mean, empty
// bags, per-sample weights, tables of different sizes), gradients by central differences, the
// fused update (SGD, row-wise Adagrad) against the f64 twin on the CPU with ids that repeat
// across the fused kernel's chunks, bit-identical tables from two runs, and bad inputs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/embedding_bag/embedding_bag.h"
#include "lib/ops/sparse_rows/sparse_rows.h"
#include "lib/runtime.h"
#include "tests/lib/fused_test_util.h"

namespace ft {
namespace {

using namespace ft::test;

/// A batch of bags over tables of the given row counts: B samples, sizes drawn in [0, max_size]
/// (empty bags included), ids drawn from the first `distinct` rows of each table (few distinct
/// rows: every row repeats).
struct Bags {
  std::vector<int64_t> table_rows;
  Tensor row_offsets, ids, offsets;
  int64_t n = 0;
};

Bags random_bags(const std::vector<int64_t>& table_rows, int64_t batch, int64_t max_size, int64_t distinct,
                 Generator& gen) {
  std::mt19937_64 rng(gen.seed() ^ gen.advance(1));
  Bags bags;
  bags.table_rows = table_rows;
  const int64_t tables = static_cast<int64_t>(table_rows.size());
  std::vector<double> row_offsets{0}, ids, offsets{0};
  for (int64_t rows : table_rows) row_offsets.push_back(row_offsets.back() + static_cast<double>(rows));
  for (int64_t k = 0; k < batch * tables; ++k) {
    const int64_t size = static_cast<int64_t>(rng() % static_cast<uint64_t>(max_size + 1));
    const int64_t limit = std::min(distinct, table_rows[static_cast<size_t>(k % tables)]);
    for (int64_t i = 0; i < size; ++i) ids.push_back(static_cast<double>(rng() % static_cast<uint64_t>(limit)));
    offsets.push_back(static_cast<double>(ids.size()));
  }
  bags.n = static_cast<int64_t>(ids.size());
  bags.row_offsets = Tensor::from_vector(row_offsets, {tables + 1}, DType::I64);
  bags.ids = Tensor::from_vector(ids, {bags.n}, DType::I64);
  bags.offsets = Tensor::from_vector(offsets, {batch * tables + 1}, DType::I32);
  return bags;
}

int64_t total_rows(const Bags& b) {
  int64_t r = 0;
  for (int64_t rows : b.table_rows) r += rows;
  return r;
}

/// out[b, t] by loops in f64.
std::vector<double> pooled_by_loops(const Bags& b, const std::vector<double>& weight, int64_t d,
                                    const std::vector<double>& psw, bool mean) {
  const std::vector<double> ids = b.ids.to_vector(), off = b.offsets.to_vector(), start = b.row_offsets.to_vector();
  const int64_t tables = static_cast<int64_t>(b.table_rows.size()), bags = b.offsets.numel() - 1;
  std::vector<double> out(static_cast<size_t>(bags * d), 0.0);
  for (int64_t k = 0; k < bags; ++k) {
    const size_t begin = static_cast<size_t>(off[static_cast<size_t>(k)]), end = static_cast<size_t>(off[static_cast<size_t>(k) + 1]);
    for (size_t i = begin; i < end; ++i) {
      const int64_t row = static_cast<int64_t>(start[static_cast<size_t>(k % tables)] + ids[i]);
      for (int64_t c = 0; c < d; ++c)
        out[static_cast<size_t>(k * d + c)] += (psw.empty() ? 1.0 : psw[i]) * weight[static_cast<size_t>(row * d + c)];
    }
    if (mean && end > begin)
      for (int64_t c = 0; c < d; ++c) out[static_cast<size_t>(k * d + c)] /= static_cast<double>(end - begin);
  }
  return out;
}

TEST(EmbeddingBagTest, MatchesLoopsInF64) {
  Generator gen = test_generator();
  const Bags b = random_bags({5, 7, 4}, 4, 3, 100, gen);
  const int64_t d = 3;
  const Tensor weight = random_tensor({total_rows(b), d}, DType::F64, kCPU, gen);
  const Tensor psw = random_tensor({b.n}, DType::F64, kCPU, gen);
  for (bool mean : {false, true})
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(std::string(mean ? "mean" : "sum") + (weighted ? " weighted" : ""));
      const Tensor out = embedding_bag(weight, b.row_offsets, b.ids, b.offsets, weighted ? psw : Tensor(),
                                       {.mode = mean ? BagMode::Mean : BagMode::Sum});
      ASSERT_EQ(out.shape(), (Shape{4, 3, d}));
      const std::vector<double> expected =
          pooled_by_loops(b, weight.to_vector(), d, weighted ? psw.to_vector() : std::vector<double>{}, mean);
      EXPECT_TRUE(all_close(out, Tensor::from_vector(expected, out.shape(), DType::F64), 1e-12));
    }
}

TEST(EmbeddingBagTest, GradCheckF64) {
  Generator gen = test_generator();
  const Bags b = random_bags({4, 3}, 3, 3, 100, gen);
  for (BagMode mode : {BagMode::Sum, BagMode::Mean})
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return embedding_bag(in[0], b.row_offsets, b.ids, b.offsets, in[1], {.mode = mode});
        },
        {random_tensor({7, 2}, DType::F64, kCPU, gen), random_tensor({b.n}, DType::F64, kCPU, gen)}, gen));
}

TEST(EmbeddingBagTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Bags b = random_bags({5, 7}, 2, 2, 100, gen);
  const Tensor weight = random_tensor({12, 4}, DType::F32, kCPU, gen);
  const Tensor bad_id = Tensor::from_vector({0, 7}, {2}, DType::I64);  // 7 is outside table 1 (7 rows)
  const Tensor two_bags = Tensor::from_vector({0, 1, 2}, {3}, DType::I64);
  EXPECT_FT_ERROR(embedding_bag(weight, b.row_offsets, bad_id, two_bags, Tensor(), {}), "out of range");
  EXPECT_FT_ERROR(embedding_bag(weight, b.row_offsets, bad_id, Tensor::from_vector({0, 1, 1}, {3}, DType::I64),
                                Tensor(), {}),
                  "end at 2");
  EXPECT_FT_ERROR(embedding_bag(weight, b.row_offsets, bad_id, Tensor::from_vector({0, 2}, {2}, DType::I64), Tensor(), {}),
                  "B·T");
  EXPECT_FT_ERROR(embedding_bag(weight, b.row_offsets, b.ids, b.offsets, Tensor::zeros({b.n + 1}), {}),
                  "per_sample_weights");
  EXPECT_FT_ERROR(embedding_bag(weight, b.row_offsets, b.ids, b.offsets, Tensor(), {.update = SparseRowUpdate{}}),
                  "lr");
  EXPECT_FT_ERROR(embedding_bag(weight, b.row_offsets, b.ids, b.offsets, Tensor(),
                                {.update = SparseRowUpdate{.kind = RowUpdateKind::RowWiseAdagrad,
                                                           .lr = Tensor::full({1}, 0.1)}}),
                  "accumulator");
}

/// What one step with a fused update leaves: the tables, the accumulators and the per-sample
/// weights' gradient, all as f64 on the CPU.
struct UpdateResult {
  Tensor weight, accumulator, psw_grad;
};

struct UpdateCase {
  RowUpdateKind kind;
  BagMode mode;
  bool weighted;
};

/// The accumulators an update keeps: one a row (row-wise Adagrad) or one an element.
Shape accumulator_shape(RowUpdateKind kind, int64_t rows, int64_t d) {
  return kind == RowUpdateKind::ElementwiseAdagrad ? Shape{rows, d} : Shape{rows};
}

/// One forward and backward of embedding_bag with an update, on `device` in the current kernel
/// mode: weights in `dtype` (f64 on the CPU reference, f32 on CUDA), the output and the upstream
/// gradient in `out_dtype` (upstream given in f64, rounded to out_dtype first by the caller).
UpdateResult run_update(const Bags& b, const Tensor& weight0, const Tensor& accumulator0, const Tensor& psw,
                        const Tensor& upstream, const UpdateCase& c, Device device, DType dtype, DType out_dtype) {
  Tensor weight = fresh_copy(weight0, dtype, device);
  weight.requires_grad_();
  SparseRowUpdate update{.kind = c.kind, .lr = Tensor::full({1}, 0.05, dtype, device), .lr_scale = 2.0, .eps = 1e-3};
  if (c.kind != RowUpdateKind::SGD) update.accumulator = fresh_copy(accumulator0, dtype, device);
  Tensor weights;
  if (c.weighted) {
    weights = fresh_copy(psw, dtype, device);
    weights.requires_grad_();
  }
  const Tensor out = embedding_bag(weight, b.row_offsets.to(device), b.ids.to(device), b.offsets.to(device), weights,
                                   {.mode = c.mode, .out_dtype = out_dtype, .update = update});
  out.backward(fresh_copy(upstream, out_dtype, device));
  EXPECT_FALSE(weight.grad().defined()) << "the sparse update left a dense gradient";
  UpdateResult r{fresh_copy(weight.detach(), DType::F64, kCPU), Tensor(), Tensor()};
  if (update.accumulator.defined()) r.accumulator = fresh_copy(update.accumulator, DType::F64, kCPU);
  if (c.weighted) r.psw_grad = fresh_copy(weights.grad(), DType::F64, kCPU);
  return r;
}

/// The reference: the twin in f64 on the CPU from the same values.
void expect_update_matches(const UpdateCase& c, Device device, DType out_dtype, Generator& gen) {
  // 600 ids over 2 tables; a third of them hit one row, so its run crosses many of the fused
  // kernel's chunks of sorted positions; the rest repeat within a few chunks.
  Bags b = random_bags({50, 300}, 100, 5, 40, gen);
  std::vector<double> ids = b.ids.to_vector();
  for (size_t i = 0; i < ids.size(); i += 3) ids[i] = 7;
  b.ids = Tensor::from_vector(ids, b.ids.shape(), DType::I64);
  const int64_t d = 24, rows = total_rows(b);
  const Tensor weight0 = fresh_copy(random_tensor({rows, d}, DType::F64, kCPU, gen), DType::F32, kCPU);
  const Tensor accumulator0 = fresh_copy(positive_tensor(accumulator_shape(c.kind, rows, d), DType::F64, kCPU, gen),
                                         DType::F32, kCPU);
  const Tensor psw = fresh_copy(random_tensor({b.n}, DType::F64, kCPU, gen), DType::F32, kCPU);
  const Tensor upstream =
      fresh_copy(random_tensor({100, 2, d}, DType::F64, kCPU, gen), out_dtype, kCPU);
  const UpdateResult got = run_update(b, weight0, accumulator0, psw, upstream, c, device, DType::F32, out_dtype);
  const UpdateResult ref = run_update(b, weight0, accumulator0, psw, upstream, c, kCPU, DType::F64, DType::F64);
  // Compare what the step moved, so that f32's rounding of the weights themselves (about 6e-8
  // of each) is measured against the step, not hidden by the weights' size.
  const Tensor w0 = fresh_copy(weight0, DType::F64, kCPU);
  EXPECT_TRUE(all_close(got.weight - w0, ref.weight - w0, 1e-4, 1e-6)) << "weights";
  if (c.kind != RowUpdateKind::SGD) {
    const Tensor a0 = fresh_copy(accumulator0, DType::F64, kCPU);
    EXPECT_TRUE(all_close(got.accumulator - a0, ref.accumulator - a0, 1e-4, 1e-6)) << "accumulators";
  }
  if (c.weighted) {
    EXPECT_TRUE(all_close(got.psw_grad, ref.psw_grad, 1e-4)) << "per-sample weights' gradient";
  }
}

std::vector<UpdateCase> update_cases() {
  return {{RowUpdateKind::SGD, BagMode::Sum, false},
          {RowUpdateKind::SGD, BagMode::Mean, true},
          {RowUpdateKind::RowWiseAdagrad, BagMode::Sum, true},
          {RowUpdateKind::RowWiseAdagrad, BagMode::Mean, false},
          {RowUpdateKind::ElementwiseAdagrad, BagMode::Sum, true},
          {RowUpdateKind::ElementwiseAdagrad, BagMode::Mean, false}};
}

std::string case_name(const UpdateCase& c) {
  const char* kind = c.kind == RowUpdateKind::SGD              ? "sgd"
                     : c.kind == RowUpdateKind::RowWiseAdagrad ? "row-wise adagrad"
                                                               : "element-wise adagrad";
  return std::string(kind) + (c.mode == BagMode::Mean ? " mean" : " sum") +
         (c.weighted ? " weighted" : "");
}

class EmbeddingBagDeviceTest : public DeviceModeTest {};

TEST_P(EmbeddingBagDeviceTest, ForwardMatchesF64Reference) {
  Generator gen = test_generator();
  for (int64_t d : {64, 13, 200}) {
    SCOPED_TRACE("D " + std::to_string(d));
    const Bags b = random_bags({30, 70, 5}, 40, 4, 1000, gen);
    for (DType dtype : {DType::F32, DType::BF16})
      EXPECT_TRUE(matches_f64_reference(
          [&](const std::vector<Tensor>& in) {
            return embedding_bag(in[0], b.row_offsets.to(in[0].device()), b.ids.to(in[0].device()),
                                 b.offsets.to(in[0].device()), in[1], {.mode = BagMode::Mean});
          },
          {random_tensor({105, d}, DType::F64, kCPU, gen), random_tensor({b.n}, DType::F64, kCPU, gen)}, device(),
          dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype), {false, false}));
  }
}

TEST_P(EmbeddingBagDeviceTest, UpdateMatchesF64Twin) {
  Generator gen = test_generator();
  for (const UpdateCase& c : update_cases())
    for (DType out_dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(case_name(c) + " out " + dtype_name(out_dtype));
      expect_update_matches(c, device(), out_dtype, gen);
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, EmbeddingBagDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

TEST(EmbeddingBagFusedTest, TablesAreBitIdenticalAcrossRuns) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard fused(KernelMode::Fused);
  Generator gen = test_generator();
  // Hot rows over 20,000 ids: runs of thousands of positions.
  const Bags b = random_bags({100, 1000, 20}, 2000, 4, 30, gen);
  const int64_t rows = total_rows(b), d = 64;
  const Tensor weight0 = random_tensor({rows, d}, DType::F32, kCPU, gen);
  const Tensor psw = random_tensor({b.n}, DType::F32, kCPU, gen);
  const Tensor upstream = random_tensor({2000, 3, d}, DType::BF16, kCPU, gen);
  for (const UpdateCase& c : update_cases()) {
    SCOPED_TRACE(case_name(c));
    const Tensor acc0 = positive_tensor(accumulator_shape(c.kind, rows, d), DType::F32, kCPU, gen);
    const UpdateResult first = run_update(b, weight0, acc0, psw, upstream, c, kCUDA, DType::F32, DType::BF16);
    const UpdateResult second = run_update(b, weight0, acc0, psw, upstream, c, kCUDA, DType::F32, DType::BF16);
    EXPECT_TRUE(all_equal(first.weight, second.weight));
    if (first.accumulator.defined()) {
      EXPECT_TRUE(all_equal(first.accumulator, second.accumulator));
    }
    if (first.psw_grad.defined()) {
      EXPECT_TRUE(all_equal(first.psw_grad, second.psw_grad));
    }
    EXPECT_FALSE(all_equal(first.weight, fresh_copy(weight0, DType::F64, kCPU))) << "nothing was updated";
  }
}

TEST(EmbeddingBagFusedTest, ForwardIsOneNodeAndBadIdsThrowAtTheNextRead) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard fused(KernelMode::Fused);
  Tensor weight = Tensor::zeros({12, 8}, DType::F32, kCUDA);
  weight.requires_grad_();
  const Tensor row_offsets = Tensor::from_vector({0, 5, 12}, {3}, DType::I64, kCUDA);
  const SparseRowUpdate update{.lr = Tensor::full({1}, 0.1, DType::F32, kCUDA)};
  const Tensor out = embedding_bag(weight, row_offsets, Tensor::from_vector({1, 6}, {2}, DType::I32, kCUDA),
                                   Tensor::from_vector({0, 1, 2}, {3}, DType::I32, kCUDA), Tensor(), {.update = update});
  EXPECT_EQ(graph_size(out), 1u) << "the fused kernel did not run";
  Tensor bad;
  EXPECT_NO_THROW(bad = embedding_bag(weight.detach(), row_offsets, Tensor::from_vector({1, 7}, {2}, DType::I32, kCUDA),
                                      Tensor::from_vector({0, 1, 2}, {3}, DType::I32, kCUDA), Tensor(), {}));
  EXPECT_TRUE(error_mentions([] { synchronize(); }, "out of range"));
}

TEST(SparseRowsTest, PrimitivesMatchLoops) {
  Generator gen = test_generator();
  const Tensor dst = random_tensor({6, 3}, DType::F64, kCPU, gen);
  const Tensor ids = Tensor::from_vector({4, 1, 4, 0}, {4}, DType::I64);
  const Tensor src = random_tensor({4, 3}, DType::F64, kCPU, gen);
  std::vector<double> expected = dst.to_vector();
  const std::vector<double> s = src.to_vector(), id = ids.to_vector();
  for (size_t i = 0; i < 4; ++i)
    for (size_t c = 0; c < 3; ++c) expected[static_cast<size_t>(id[i]) * 3 + c] += s[i * 3 + c];
  Tensor added = fresh_copy(dst, DType::F64, kCPU);
  index_add_rows_(added, ids, src);
  EXPECT_TRUE(all_close(added, Tensor::from_vector(expected, {6, 3}, DType::F64), 1e-15));
  // Equal rows for the repeated id: index_put_rows_ writes them whatever the order.
  Tensor put = fresh_copy(dst, DType::F64, kCPU);
  const Tensor rows = Tensor::from_vector({2, 5, 2}, {3}, DType::I64);
  const Tensor values = Tensor::from_vector({1, 2, 3, 4, 5, 6, 1, 2, 3}, {3, 3}, DType::F64);
  index_put_rows_(put, rows, values);
  std::vector<double> p = put.to_vector();
  EXPECT_EQ(std::vector<double>(p.begin() + 6, p.begin() + 9), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(std::vector<double>(p.begin() + 15, p.begin() + 18), (std::vector<double>{4, 5, 6}));
  EXPECT_FT_ERROR(index_put_rows_(put, Tensor::from_vector({6}, {1}, DType::I64), random_tensor({1, 3}, DType::F64, kCPU, gen)),
                  "out of range");
}

// Both Adagrads against loops written from their definitions, in f64: a row's gradient is the
// sum over every id that reached it (here ids repeat within and across bags), then row-wise:
// acc += mean(g²), w -= lr·g / (√acc + eps); element-wise: acc += g², w -= lr·g / (√acc + eps).
TEST(EmbeddingBagTest, AdagradUpdatesMatchLoopsInF64) {
  Generator gen = test_generator();
  const int64_t rows = 6, d = 5;
  const Tensor row_offsets = Tensor::from_vector({0, 6}, {2}, DType::I64);
  const Tensor ids = Tensor::from_vector({1, 4, 1, 1, 0, 4}, {6}, DType::I64);
  const Tensor offsets = Tensor::from_vector({0, 2, 3, 6}, {4}, DType::I64);  // 3 bags, sum
  const Tensor weight0 = random_tensor({rows, d}, DType::F64, kCPU, gen);
  const Tensor upstream = random_tensor({3, 1, d}, DType::F64, kCPU, gen);
  const std::vector<double> w0 = weight0.to_vector(), up = upstream.to_vector();
  const double lr = 0.05, eps = 1e-3;
  for (RowUpdateKind kind : {RowUpdateKind::RowWiseAdagrad, RowUpdateKind::ElementwiseAdagrad}) {
    SCOPED_TRACE(kind == RowUpdateKind::RowWiseAdagrad ? "row-wise" : "element-wise");
    const Tensor acc0 = positive_tensor(accumulator_shape(kind, rows, d), DType::F64, kCPU, gen);
    Tensor weight = fresh_copy(weight0, DType::F64, kCPU);
    weight.requires_grad_();
    const SparseRowUpdate update{.kind = kind, .lr = Tensor::full({1}, lr, DType::F64), .accumulator = fresh_copy(acc0, DType::F64, kCPU), .eps = eps};
    embedding_bag(weight, row_offsets, ids, offsets, Tensor(), {.update = update}).backward(upstream);
    // Each row's summed gradient: bag k's upstream once for every id of the row in bag k.
    const std::vector<double> id = ids.to_vector(), off = offsets.to_vector(), a0 = acc0.to_vector();
    std::vector<double> g(rows * d, 0.0), want_w = w0, want_acc = a0;
    std::vector<bool> touched(rows, false);
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t i = static_cast<int64_t>(off[k]); i < static_cast<int64_t>(off[k + 1]); ++i) {
        const int64_t r = static_cast<int64_t>(id[i]);
        touched[r] = true;
        for (int64_t c = 0; c < d; ++c) g[r * d + c] += up[k * d + c];
      }
    for (int64_t r = 0; r < rows; ++r) {
      if (!touched[r]) continue;
      double sq = 0;
      for (int64_t c = 0; c < d; ++c) sq += g[r * d + c] * g[r * d + c];
      if (kind == RowUpdateKind::RowWiseAdagrad) want_acc[r] += sq / d;
      for (int64_t c = 0; c < d; ++c) {
        double& acc = kind == RowUpdateKind::RowWiseAdagrad ? want_acc[r] : want_acc[r * d + c];
        if (kind == RowUpdateKind::ElementwiseAdagrad) acc += g[r * d + c] * g[r * d + c];
        want_w[r * d + c] -= lr * g[r * d + c] / (std::sqrt(acc) + eps);
      }
    }
    EXPECT_TRUE(all_close(weight.detach(), Tensor::from_vector(want_w, {rows, d}, DType::F64), 1e-12));
    EXPECT_TRUE(all_close(update.accumulator, Tensor::from_vector(want_acc, acc0.shape(), DType::F64), 1e-12));
    EXPECT_EQ(weight.detach().narrow(0, 2, 1).to_vector(), weight0.narrow(0, 2, 1).to_vector()) << "row 2 was not reached";
  }
}

// The CPU's row-wise Adagrad works on the rows a batch touches, not the table: one step over a
// table of 4M rows takes about as long as over one of 4K (a table-sized zeroed scratch made the
// big one take over a hundred times longer). Medians of 5 steps; the bound leaves a wide margin.
TEST(EmbeddingBagCpu, RowWiseAdagradStepDoesNotScaleWithTheTable) {
  Generator gen = test_generator();
  auto step_ms = [&](int64_t rows) {
    const Bags b = random_bags({rows}, 256, 2, 1000, gen);
    Tensor weight = Tensor::full({rows, 8}, 0.01, DType::F32, kCPU);
    weight.requires_grad_();
    const SparseRowUpdate update{.kind = RowUpdateKind::RowWiseAdagrad,
                                 .lr = Tensor::full({1}, 0.05, DType::F32, kCPU),
                                 .accumulator = Tensor::zeros({rows}, DType::F32, kCPU)};
    std::vector<double> times;
    for (int i = 0; i < 5; ++i) {
      const auto start = std::chrono::steady_clock::now();
      embedding_bag(weight, b.row_offsets, b.ids, b.offsets, Tensor(), {.update = update}).backward(
          Tensor::full({256, 1, 8}, 1.0, DType::F32, kCPU));
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    return times[2];
  };
  const double small = step_ms(4096), big = step_ms(int64_t{4} << 20);
  EXPECT_LT(big, 10 * small + 2.0) << "4K rows: " << small << " ms a step, 4M rows: " << big << " ms";
}

}  // namespace
}  // namespace ft
