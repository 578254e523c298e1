// The step is ft-mlp's: a batch of images gathered from a device-resident set by row ids (here
// 4 x batch random bf16 images, so the gather reads rows it did not just write), cross-entropy
// over 10 classes, AdamW (lr 1e-3, weight decay 0.01) on bf16 parameters with f32 moments. The ids
// and labels are uploaded every step by the Trainer, as ft-mlp's are.
#include "bench/ft-bench/mlp.h"

#include <cstdio>

#include "bench/ft-bench/trainer_timing.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/cross_entropy/cross_entropy.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/runtime.h"
#include "models/mlp/mlp_model.h"
#include "optim/adamw.h"
#include "train/data/batch_source.h"

namespace ft::bench {

namespace {

TimedSteps measure(const MlpBenchOptions& o, KernelMode mode) {
  KernelModeGuard guard(mode);
  auto model = cli::build_mlp(1024, 3, 0.1, 0);
  model->to(kCUDA, DType::BF16);
  AdamW optimizer(model->parameters(), AdamW::Options{.lr = 1e-3, .weight_decay = 0.01});
  Generator gen(11);
  const int64_t images_held = 4 * o.batch;
  const Tensor images = Tensor::randn({images_held, 784}, gen, DType::BF16, kCUDA);
  const Tensor ids = (Tensor::rand({o.batch}, gen) * static_cast<double>(images_held)).to(DType::I64);
  const Tensor labels = (Tensor::rand({o.batch}, gen) * 10.0).to(DType::I64);
  FixedBatchSource source({{"ids", ids}, {"labels", labels}});
  Trainer trainer(*model, optimizer, source,
                  [&](Module& m, const Batch& b) {
                    return cross_entropy(m.forward(gather_rows(images, b.at("ids"))), b.at("labels"));
                  },
                  Trainer::Options{.schedule = {.max_lr = 1e-3},
                                   .log_every = 0,
                                   .warmup_steps = 0,
                                   .graph = o.graph,
                                   .window_loss = false});
  return time_trainer_steps(trainer, o.warmup, o.steps);
}

}  // namespace

int run_mlp_bench(const MlpBenchOptions& o, BenchReport& report) {
  FT_CHECK(o.batch > 0 && o.steps > 0 && o.warmup >= 0, "ft-bench mlp: --batch and --steps must be positive");
  std::printf("ft-bench mlp: 784 -> 1024 x3 -> 10, B=%lld, bf16, AdamW, %d steps after %d warm-up, on %s\n",
              static_cast<long long>(o.batch), o.steps, o.warmup, device_name().c_str());
  const std::string workload = o.batch == 4096 ? "mlp-fmnist" : "mlp-fmnist B" + std::to_string(o.batch);
  std::printf("\n%-10s %10s %10s %14s %10s %10s %8s\n", "kernels", "gpu ms", "wall ms", "samples/s (gpu)", "peak GB",
              "loss", "graph");
  for (int fused = 1; fused >= 0; --fused) {
    const char* name = fused ? "fused" : "unfused";
    if (o.kernels != "both" && o.kernels != name) continue;
    const TimedSteps t = measure(o, fused ? KernelMode::Fused : KernelMode::Unfused);
    const FitSummary& s = t.summary;
    const double samples = static_cast<double>(o.batch) / (s.step_ms * 1e-3), peak_gb = static_cast<double>(t.peak_bytes) / 1e9;
    std::printf("%-10s %10.3f %10.3f %14.0f %10.3f %10.4f %8s\n", name, s.step_ms, s.wall_ms, samples, peak_gb,
                s.final_loss, s.replayed ? "replay" : "eager");
    std::printf("RESULT mlp kernels=%s graph=%d ms=%.4f wall_ms=%.4f samples_per_s=%.0f peak_gb=%.3f\n", name,
                s.replayed ? 1 : 0, s.step_ms, s.wall_ms, samples, peak_gb);
    report.add(workload, name, s.step_ms,
               {{"graph", s.replayed ? 1.0 : 0.0}, {"wall_ms", s.wall_ms}, {"samples_per_s", samples}, {"peak_gb", peak_gb}});
    std::fflush(stdout);
  }
  std::printf("(gpu ms: median of CUDA events around each step; wall ms: wall clock per step)\n");
  return 0;
}

}  // namespace ft::bench
