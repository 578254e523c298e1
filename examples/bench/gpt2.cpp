// One step: zero_grad, forward and loss (linear_cross_entropy), backward, AdamW with clipping at
// global norm 1.0 (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on 2-D weights), on random tokens
// below 50257. Each step is bracketed by CUDA events after the warm-up (StepTimer); the median
// is reported with tok/s, MFU (6·N + 6·L·C·T FLOPs per token against 989 TFLOP/s) and the peak
// of device memory over the timed steps (the library's pool plus, with --graph, the memory the
// step's CUDA graph owns).
#include "examples/bench/gpt2.h"

#include <cstdio>

#include "layers/gpt.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise.h"
#include "lib/runtime.h"
#include "optim/adamw.h"
#include "train/graphed_step.h"
#include "train/step_timer.h"

namespace ft::bench {

namespace {

struct Gpt2Result {
  double ms = 0, tok_per_s = 0, mfu = 0, final_loss = 0;
  size_t peak_bytes = 0;
  bool replayed = false;
};

Gpt2Result measure(const Gpt2BenchOptions& o, KernelMode mode) {
  KernelModeGuard guard(mode);
  const GPTConfig config{.vocab = 50304, .block_size = 1024, .layers = o.layers, .heads = 12, .channels = 768};
  GPT model(config, 1234);
  model.to(kCUDA, DType::BF16);
  AdamW optimizer(model.parameters(), AdamW::Options{.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                                     .weight_decay = 0.1, .policy = {.max_grad_norm = 1.0}});
  Generator gen(99);
  auto tokens = [&] {
    return (Tensor::rand({o.batch, o.seq}, gen) * 50257.0).to(DType::I64).to(kCUDA);
  };
  const Tensor ids = tokens(), targets = tokens();
  StepTimer timer(kCUDA);
  const StepFn loss_fn = [&](const Tensor& x, const Tensor& y) { return model.loss(x, y); };
  const StepFn one_step = training_step(optimizer, loss_fn);
  GraphedStep graphed(optimizer, loss_fn);
  Tensor loss;
  auto step = [&] { loss = o.graph ? graphed.run(ids, targets) : one_step(ids, targets); };
  for (int i = 0; i < o.warmup; ++i) step();
  synchronize();
  reset_peak_memory();
  profiler_start();
  for (int i = 0; i < o.steps; ++i) {
    timer.begin_step();
    step();
    timer.end_step();
  }
  profiler_stop();
  Gpt2Result r;
  r.ms = median(timer.collect());
  r.peak_bytes = peak_memory();
  r.final_loss = loss.item();
  r.replayed = graphed.replaying();
  const double tokens_per_step = static_cast<double>(o.batch * o.seq);
  const double flops_per_token = 6.0 * static_cast<double>(model.parameter_count()) +
                                 6.0 * static_cast<double>(config.layers * config.channels * o.seq);
  r.tok_per_s = tokens_per_step / (r.ms * 1e-3);
  r.mfu = flops_per_token * r.tok_per_s / 989e12;
  return r;
}

}  // namespace

int run_gpt2_bench(const Gpt2BenchOptions& o) {
  std::printf("ft-bench gpt2: L=%lld C=768 NH=12 V=50304, B=%lld T=%lld, bf16, AdamW + clip, %d steps after %d "
              "warm-up\n",
              static_cast<long long>(o.layers), static_cast<long long>(o.batch), static_cast<long long>(o.seq),
              o.steps, o.warmup);
  Gpt2Result results[2];
  const bool run[2] = {o.kernels != "fused", o.kernels != "unfused"};  // unfused, fused
  for (int fused = 0; fused < 2; ++fused) {
    if (!run[fused]) continue;
    results[fused] = measure(o, fused ? KernelMode::Fused : KernelMode::Unfused);
    std::fflush(stdout);
  }
  std::printf("\n%-10s %10s %12s %8s %12s %10s %8s\n", "kernels", "ms/step", "tok/s", "MFU", "peak GB", "loss", "graph");
  for (int fused = 1; fused >= 0; --fused) {
    if (!run[fused]) continue;
    const Gpt2Result& r = results[fused];
    const double peak_gb = static_cast<double>(r.peak_bytes) / 1e9;
    std::printf("%-10s %10.2f %12.0f %7.1f%% %12.2f %10.4f %8s\n", fused ? "fused" : "unfused", r.ms, r.tok_per_s,
                100.0 * r.mfu, peak_gb, r.final_loss, r.replayed ? "replay" : "eager");
    std::printf("RESULT gpt2 kernels=%s graph=%d ms=%.3f tok_per_s=%.0f mfu=%.4f peak_gb=%.3f\n",
                fused ? "fused" : "unfused", r.replayed ? 1 : 0, r.ms, r.tok_per_s, r.mfu, peak_gb);
  }
  if (run[0] && run[1]) std::printf("fused vs unfused: %.2fx\n", results[0].ms / results[1].ms);
  return 0;
}

}  // namespace ft::bench
