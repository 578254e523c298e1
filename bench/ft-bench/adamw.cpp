#include "bench/ft-bench/adamw.h"

#include <cstdio>
#include <string>
#include <vector>

#include "bench/ft-bench/bandwidth.h"
#include "bench/ft-bench/graph_timer.h"
#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "models/gpt2/gpt.h"
#include "optim/adamw.h"

namespace ft::bench {

namespace {

struct Variant {
  std::string name;
  KernelMode mode;
  DType dtype;  // of the parameters; bf16 ones get f32 masters
  StepPolicy policy;
  double bytes_per_param;  // fewest bytes the step must move per parameter
  const char* note;
};

}  // namespace

int run_adamw_bench(const AdamWBenchOptions& options, BenchReport& report) {
  const StepPolicy plain{.max_grad_norm = 0.0, .skip_nonfinite = false};
  const StepPolicy guarded{.max_grad_norm = 1.0, .skip_nonfinite = true};
  const std::vector<Variant> variants = {
      {"adamw-gpt2", KernelMode::Fused, DType::F32, plain, 28.0, "read grad, param, m, v; write param, m, v"},
      {"adamw-gpt2+norm+clip", KernelMode::Fused, DType::F32, guarded, 32.0, "the above + the norm's read of the grads"},
      {"adamw-gpt2-bf16+norm", KernelMode::Fused, DType::BF16, guarded, 34.0,
       "the gpt2 step's: f32 grad, master, m, v; bf16 param written; norm"},
      {"adamw-gpt2 twin", KernelMode::Unfused, DType::F32, plain, 28.0, "per-tensor primitive ops"},
  };
  std::printf("ft-bench adamw: gpt2-124M's parameters (148 tensors, 124.5M), f32 gradients; %d iterations after %d "
              "warm-up\n", options.iterations, options.warmup);
  std::printf("%% peak: of the measured device-to-device copy bandwidth, %.0f GB/s\n", copy_bandwidth() / 1e9);
  std::printf("\n%-22s %10s %10s %9s %8s  %s\n", "variant", "graph ms", "eager ms", "GB/s", "% peak", "bytes counted");
  std::vector<Timing> timings;
  for (const Variant& v : variants) {
    KernelModeGuard guard(v.mode);
    // gpt2-124M's parameters (tied head, vocab padded to 50304) on the GPU.
    GPT model(GPTConfig{}, 1);
    model.to(kCUDA, v.dtype);
    const std::vector<Tensor> params = model.parameters();
    AdamW optimizer(params, AdamW::Options{.lr = 3e-4, .weight_decay = 0.1, .policy = v.policy});
    // Random gradients in the optimizer's flat buffer (never zeros: the norm and the moments see
    // real values).
    Generator gen(7);
    int64_t count = 0;
    for (const Tensor& p : params) {
      count += p.numel();
      p.grad().copy_(Tensor::randn(p.shape(), gen, DType::F32, p.device()) * 1e-2);
    }
    const Timing t = time_device_work([&] { optimizer.step(); }, options.warmup, options.iterations);
    const double bytes = v.bytes_per_param * static_cast<double>(count);
    const double ms = t.graph_ms > 0 ? t.graph_ms : t.eager_ms;
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-22s %10.3f %10.3f %9.0f %7.1f%%  %s\n", v.name.c_str(), t.graph_ms, t.eager_ms, gbps,
                percent_of_copy(gbps * 1e9), v.note);
    timings.push_back(t);
    std::fflush(stdout);
  }
  // Graph replay (the Trainer's default) and eager enqueueing, whose host time the twin's 148
  // tensors x ~10 ops pay on every step.
  std::printf("fused vs twin: %.2fx from graphs, %.2fx eager\n", timings[3].graph_ms / timings[0].graph_ms,
              timings[3].eager_ms / timings[0].eager_ms);
  // The peers' adamw-gpt2 is the plain f32 step: the fused one and the twin, each from its graph.
  for (size_t i : {size_t{0}, size_t{3}})
    report.add("adamw-gpt2", i == 0 ? "fused" : "unfused", timings[i].graph_ms,
               {{"graph", 1}, {"eager_ms", timings[i].eager_ms}});
  for (size_t i = 0; i < variants.size(); ++i)
    std::printf("RESULT op=%s graph_ms=%.4f eager_ms=%.4f\n", variants[i].name.c_str(), timings[i].graph_ms,
                timings[i].eager_ms);
  return 0;
}

}  // namespace ft::bench
