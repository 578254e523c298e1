// Whole steps: the preset's DLRM (bf16 MLPs with AdamW, f32 tables with sparse SGD lr 0.01 in
// backward, fused BCE) on one fixed batch of random dense features, ids uniform over each table
// and labels, run by the Trainer (its batch uploaded every step). "gpu ms" is the median of
// CUDA events around each step, "wall ms" the wall clock per step. Ops: the embedding bag's
// forward and its backward with the update, and the interaction's forward + backward, each
// replayed from a CUDA graph, with the bytes they must move against the device's measured copy
// bandwidth (bandwidth.h).
#include "bench/ft-bench/dlrm.h"

#include <cstdio>
#include <vector>

#include "bench/ft-bench/bandwidth.h"
#include "bench/ft-bench/graph_timer.h"
#include "bench/ft-bench/trainer_timing.h"
#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bce/bce.h"
#include "lib/ops/cross_term/cross_term.h"
#include "lib/ops/dot_interaction/dot_interaction.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/embedding_bag/embedding_bag.h"
#include "lib/runtime.h"
#include "models/dlrm/dlrm.h"
#include "optim/adamw.h"
#include "train/data/batch_source.h"
#include "train/loop/trainer.h"

namespace ft::bench {

namespace {

struct Shape {
  int64_t dim, batch, table_rows;
  std::vector<int64_t> bottom, top;
};

Shape preset_shape(const DlrmBenchOptions& o) {
  Shape s = o.preset == "mlperf" ? Shape{128, 65536, 1000000, {512, 256, 128}, {1024, 1024, 512, 256, 1}}
                                 : Shape{64, 8192, 100000, {512, 256, 64}, {512, 256, 1}};
  FT_CHECK(o.preset == "mlperf" || o.preset == "bench", "ft-bench dlrm: --preset must be bench or mlperf");
  if (o.batch > 0) s.batch = o.batch;
  return s;
}

constexpr int64_t kTables = 26;

Batch random_batch(const Shape& s, Generator& gen) {
  const Tensor dense = log(Tensor::rand({s.batch, 13}, gen) * 1000.0 + 1.0);
  const Tensor ids = (Tensor::rand({s.batch, kTables}, gen) * static_cast<double>(s.table_rows)).to(DType::I32);
  const Tensor labels = cast(lt(Tensor::rand({s.batch}, gen), Tensor::full({1}, 0.25)), DType::F32);
  return Batch{{"dense", dense}, {"sparse", ids}, {"labels", labels}};
}

struct StepResult {
  double ms = 0, wall_ms = 0, loss = 0;
  size_t peak_bytes = 0;
  bool replayed = false;
};

StepResult measure_steps(const DlrmBenchOptions& o, const Shape& s, KernelMode mode) {
  KernelModeGuard guard(mode);
  Generator gen(7);
  DLRM model({.bottom = s.bottom,
              .top = s.top,
              .tables = {.table_rows = std::vector<int64_t>(kTables, s.table_rows), .dim = s.dim, .lr = 0.01}},
             gen);
  model.to(kCUDA, DType::BF16);
  AdamW optimizer(model.dense_parameters(), AdamW::Options{.lr = 1e-3, .weight_decay = 0.0});
  FixedBatchSource source(random_batch(s, gen));
  Trainer trainer(model, optimizer, source,
                  [&](Module&, const Batch& b) {
                    return binary_cross_entropy_with_logits(model.logits(b.at("dense"), b.at("sparse")), b.at("labels"));
                  },
                  Trainer::Options{.schedule = {.max_lr = 1e-3},
                                   .log_every = 0,
                                   .warmup_steps = 0,
                                   .graph = o.graph,
                                   .window_loss = false});
  const TimedSteps timed = time_trainer_steps(trainer, o.warmup, o.steps);
  return {timed.summary.step_ms, timed.summary.wall_ms, timed.summary.final_loss, timed.peak_bytes,
          timed.summary.replayed};
}

}  // namespace

void dlrm_ops_table(const DlrmBenchOptions& o) {
  const Shape s = preset_shape(o);
  Generator gen(3);
  const int64_t rows = kTables * s.table_rows, n = s.batch * kTables, d = s.dim;
  std::printf("\nops at %s shapes: B=%lld, 26 tables x %lld x %lld f32, out bf16; graph ms (median of %d)\n",
              o.preset.c_str(), static_cast<long long>(s.batch), static_cast<long long>(s.table_rows),
              static_cast<long long>(d), o.steps);
  std::printf("%% copy: of the measured device-to-device copy bandwidth, %.0f GB/s\n", copy_bandwidth() / 1e9);
  std::printf("%-34s %9s %9s %10s %10s %11s\n", "op", "fused", "twin", "twin/fused", "min bytes", "fused % copy");
  Tensor weight = Tensor::rand({rows, d}, gen, DType::F32, kCUDA) * 0.01;
  std::vector<double> starts;
  for (int64_t t = 0; t <= kTables; ++t) starts.push_back(static_cast<double>(t * s.table_rows));
  const Tensor row_offsets = Tensor::from_vector(starts, {kTables + 1}, DType::I64, kCUDA);
  const Tensor ids = (Tensor::rand({n}, gen) * static_cast<double>(s.table_rows)).to(DType::I32).to(kCUDA);
  const Tensor offsets = Tensor::arange(n + 1, DType::I32, kCUDA);
  const Tensor grad = Tensor::randn({s.batch, kTables, d}, gen, DType::BF16, kCUDA) * 0.01;
  const SparseRowUpdate update{.lr = Tensor::full({1}, 1e-6, DType::F32, kCUDA)};
  weight.requires_grad_();
  auto row = [&](const char* name, const std::function<void()>& work, double bytes) {
    double ms[2] = {0, 0};
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
      ms[fused] = time_device_work(work, o.warmup, o.steps).graph_ms;
    }
    std::printf("%-34s %9.4f %9.4f %10.2f %8.1f MB %10.1f%%\n", name, ms[1], ms[0], ms[0] / ms[1], bytes / 1e6,
                percent_of_copy(bytes / (ms[1] * 1e-3)));
  };
  // Forward: each id's f32 row read, each bag's bf16 row written, the ids read.
  const double forward_bytes = static_cast<double>(n * d * 4 + n * d * 2 + n * 4);
  row("embedding_bag forward", [&] {
    NoGradGuard no_grad;
    embedding_bag(weight, row_offsets, ids, offsets, Tensor(), {.out_dtype = DType::BF16});
  }, forward_bytes);
  // Forward + backward with the SGD update: the forward's bytes, the bf16 gradient read, each
  // reached row read and written (ids are nearly all distinct at these sizes).
  row("embedding_bag fwd + bwd/update", [&] {
    const Tensor out = embedding_bag(weight, row_offsets, ids, offsets, Tensor(),
                                     {.out_dtype = DType::BF16, .update = update});
    out.backward(grad);
  }, forward_bytes + static_cast<double>(n * d * 2 + 2 * n * d * 4));
  Tensor dense = Tensor::randn({s.batch, d}, gen, DType::BF16, kCUDA);
  Tensor pooled = Tensor::randn({s.batch, kTables, d}, gen, DType::BF16, kCUDA);
  dense.requires_grad_();
  pooled.requires_grad_();
  const int64_t width = d + 27 * 26 / 2;
  const Tensor dout = Tensor::randn({s.batch, width}, gen, DType::BF16, kCUDA);
  // Forward reads the 27 vectors and writes the row; backward reads both and writes 27 vectors.
  const double interaction_bytes = static_cast<double>(s.batch * (27 * d * 2 * 3 + width * 2 * 2));
  row("dot_interaction fwd + bwd", [&] { gradients(dot_interaction(dense, pooled), dout, {dense, pooled}); },
      interaction_bytes);
  // DCNv2's cross term over the 27 vectors joined: forward reads x0, y, x and writes the output;
  // backward reads the gradient, x0 and y and writes d x0 and d y (the bias's sums are a column).
  const int64_t cross_width = 27 * d;
  Tensor x0 = Tensor::randn({s.batch, cross_width}, gen, DType::BF16, kCUDA);
  Tensor y = Tensor::randn({s.batch, cross_width}, gen, DType::BF16, kCUDA);
  Tensor x = Tensor::randn({s.batch, cross_width}, gen, DType::BF16, kCUDA);
  Tensor bias = Tensor::randn({cross_width}, gen, DType::BF16, kCUDA);
  for (Tensor* t : {&x0, &y, &x, &bias}) t->requires_grad_();
  const Tensor dcross = Tensor::randn({s.batch, cross_width}, gen, DType::BF16, kCUDA);
  row("cross_term fwd + bwd (DCNv2)",
      [&] { gradients(cross_term(x0, y, bias, x), dcross, {x0, y, bias, x}); },
      static_cast<double>(s.batch * cross_width * 2 * 9));
}

int run_dlrm_bench(const DlrmBenchOptions& o, BenchReport& report) {
  const Shape s = preset_shape(o);
  std::printf("ft-bench dlrm %s: B=%lld, 26 tables x %lld x %lld, MLPs bf16 with AdamW, tables f32 with sparse SGD, "
              "%d steps after %d warm-up, on %s\n",
              o.preset.c_str(), static_cast<long long>(s.batch), static_cast<long long>(s.table_rows),
              static_cast<long long>(s.dim), o.steps, o.warmup, device_name().c_str());
  StepResult results[2];
  const bool run[2] = {o.kernels != "fused", o.kernels != "unfused"};  // unfused, fused
  for (int fused = 0; fused < 2; ++fused) {
    if (!run[fused]) continue;
    try {
      results[fused] = measure_steps(o, s, fused ? KernelMode::Fused : KernelMode::Unfused);
    } catch (const Error& e) {
      std::printf("%s: failed: %s\n", fused ? "fused" : "unfused", e.what());
      synchronize();
      results[fused] = {};
    }
    std::fflush(stdout);
  }
  std::printf("\n%-10s %10s %10s %14s %10s %10s %8s\n", "kernels", "gpu ms", "wall ms", "samples/s (gpu)", "peak GB",
              "loss", "graph");
  for (int fused = 1; fused >= 0; --fused) {
    if (!run[fused] || results[fused].ms == 0) continue;
    const StepResult& r = results[fused];
    const double samples = static_cast<double>(s.batch) / (r.ms * 1e-3);
    std::printf("%-10s %10.3f %10.3f %14.0f %10.2f %10.4f %8s\n", fused ? "fused" : "unfused", r.ms, r.wall_ms, samples,
                static_cast<double>(r.peak_bytes) / 1e9, r.loss, r.replayed ? "replay" : "eager");
    std::printf("RESULT dlrm preset=%s kernels=%s graph=%d ms=%.4f wall_ms=%.4f samples_per_s=%.0f peak_gb=%.3f\n",
                o.preset.c_str(), fused ? "fused" : "unfused", r.replayed ? 1 : 0, r.ms, r.wall_ms, samples,
                static_cast<double>(r.peak_bytes) / 1e9);
    std::string workload = o.preset == "mlperf" ? "dlrm-mlperf" : "dlrm-kaggle";
    if (s.batch != preset_shape({.preset = o.preset}).batch)
      workload += " B" + std::to_string(s.batch) + " rows" + std::to_string(s.table_rows);
    report.add(workload, fused ? "fused" : "unfused", r.ms,
               {{"graph", r.replayed ? 1.0 : 0.0}, {"wall_ms", r.wall_ms}, {"samples_per_s", samples},
                {"peak_gb", static_cast<double>(r.peak_bytes) / 1e9}});
  }
  if (run[0] && run[1] && results[0].ms > 0 && results[1].ms > 0)
    std::printf("fused vs unfused: %.2fx\n", results[0].ms / results[1].ms);
  if (o.ops) dlrm_ops_table(o);
  return 0;
}

}  // namespace ft::bench
