#include "examples/bench/adamw.h"

#include <cstdio>
#include <string>
#include <vector>

#include "examples/bench/graph_timer.h"
#include "layers/gpt.h"
#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise.h"
#include "optim/adamw.h"

namespace ft::bench {

namespace {

struct Variant {
  std::string name;
  KernelMode mode;
  StepPolicy policy;
  double bytes_per_param;  // fewest bytes the step must move per parameter
  const char* note;
};

}  // namespace

int run_adamw_bench(const AdamWBenchOptions& options) {
  // gpt2-124M's parameters (tied head, vocab padded to 50304), fp32 on the GPU, with fp32 grads.
  GPT model(GPTConfig{}, 1);
  model.to(kCUDA, DType::F32);
  std::vector<Tensor> params = model.parameters();
  int64_t count = 0;
  Generator gen(7);
  for (const Tensor& p : params) {
    count += p.numel();
    p.set_grad(Tensor::randn(p.shape(), gen, DType::F32, p.device()) * 1e-2);
  }
  std::printf("ft-bench adamw: %zu fp32 tensors, %.1fM parameters (gpt2-124M), %d iterations after %d warm-up\n",
              params.size(), static_cast<double>(count) / 1e6, options.iterations, options.warmup);
  const StepPolicy plain{.max_grad_norm = 0.0, .skip_nonfinite = false};
  const StepPolicy guarded{.max_grad_norm = 1.0, .skip_nonfinite = true};
  const std::vector<Variant> variants = {
      {"adamw-gpt2", KernelMode::Fused, plain, 28.0, "read grad, param, m, v; write param, m, v"},
      {"adamw-gpt2+norm+clip", KernelMode::Fused, guarded, 32.0, "the above + the norm's read of the grads"},
      {"adamw-gpt2 twin", KernelMode::Unfused, plain, 28.0, "per-tensor primitive ops"},
  };
  std::printf("\n%-22s %10s %10s %9s %8s  %s\n", "variant", "graph ms", "eager ms", "GB/s", "% peak", "bytes counted");
  std::vector<Timing> timings;
  for (const Variant& v : variants) {
    KernelModeGuard guard(v.mode);
    AdamW optimizer(params, AdamW::Options{.lr = 3e-4, .weight_decay = 0.1, .policy = v.policy});
    const Timing t = time_device_work([&] { optimizer.step(); }, options.warmup, options.iterations);
    const double bytes = v.bytes_per_param * static_cast<double>(count);
    const double ms = t.graph_ms > 0 ? t.graph_ms : t.eager_ms;
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-22s %10.3f %10.3f %9.0f %7.1f%%  %s\n", v.name.c_str(), t.graph_ms, t.eager_ms, gbps,
                100.0 * gbps * 1e9 / kCeilingBytesPerS, v.note);
    timings.push_back(t);
    std::fflush(stdout);
  }
  // The twin's step does not capture (its scalar ops are not all capturable yet): eager vs eager.
  std::printf("fused vs twin (eager): %.2fx\n", timings[2].eager_ms / timings[0].eager_ms);
  for (size_t i = 0; i < variants.size(); ++i)
    std::printf("RESULT op=%s graph_ms=%.4f eager_ms=%.4f\n", variants[i].name.c_str(), timings[i].graph_ms,
                timings[i].eager_ms);
  return 0;
}

}  // namespace ft::bench
