#include "bench/ft-bench/swiglu_ops.h"

#include <cstdio>
#include <functional>

#include "bench/ft-bench/graph_timer.h"
#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bias_act/bias_act.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/swiglu_linear/swiglu_linear.h"
#include "lib/runtime.h"

namespace ft::bench {

void swiglu_down_table(const OpsBenchOptions& options) {
  struct Case {
    const char* name;
    int64_t rows, hidden, out;
  };
  const Case shapes[] = {{"llama-1b", 8192, 8192, 2048}, {"llama-8b", 4096, 14336, 4096}};
  std::printf("\nswiglu + down projection fwd+bwd (da, db, dW), graph ms; kept MB: held from forward to backward\n");
  std::printf("%-28s %10s %10s %10s %10s %10s %10s\n", "shape", "fused", "kept MB", "keep h", "kept MB", "twin",
              "kept MB");
  for (const Case& s : shapes) {
    Generator gen(13);
    Tensor a = Tensor::randn({s.rows, s.hidden}, gen, DType::BF16, kCUDA) * 2.0;
    Tensor b = Tensor::randn({s.rows, s.hidden}, gen, DType::BF16, kCUDA);
    Tensor w = Tensor::randn({s.out, s.hidden}, gen, DType::BF16, kCUDA) * 0.01;
    for (Tensor* t : {&a, &b, &w}) t->requires_grad_();
    const Tensor dy = Tensor::randn({s.rows, s.out}, gen, DType::BF16, kCUDA);
    const std::function<Tensor()> variants[3] = {
        [&] { return swiglu_linear(a, b, w); },
        [&] { return matmul(swiglu(a, b), w, false, true); },
        [&] { return swiglu_linear_composite(a, b, w); }};
    const KernelMode modes[3] = {KernelMode::Fused, KernelMode::Fused, KernelMode::Unfused};
    double ms[3], kept_mb[3];
    for (int v = 0; v < 3; ++v) {
      KernelModeGuard guard(modes[v]);
      synchronize();
      const size_t before = device_memory_in_use();
      {
        const Tensor y = variants[v]();
        synchronize();
        kept_mb[v] = static_cast<double>(device_memory_in_use() - before) / 1e6;
      }
      ms[v] = time_device_work([&] { gradients(variants[v](), dy, {a, b, w}); }, options.warmup, options.iterations)
                  .graph_ms;
    }
    char name[64];
    std::snprintf(name, sizeof name, "%s %lldx%lld->%lld", s.name, static_cast<long long>(s.rows),
                  static_cast<long long>(s.hidden), static_cast<long long>(s.out));
    std::printf("%-28s %10.3f %10.1f %10.3f %10.1f %10.3f %10.1f\n", name, ms[0], kept_mb[0], ms[1], kept_mb[1], ms[2],
                kept_mb[2]);
    std::printf("RESULT swiglu_down=%s fused_ms=%.4f keep_h_ms=%.4f twin_ms=%.4f fused_kept_mb=%.1f keep_h_kept_mb=%.1f "
                "twin_kept_mb=%.1f\n",
                s.name, ms[0], ms[1], ms[2], kept_mb[0], kept_mb[1], kept_mb[2]);
    std::fflush(stdout);
  }
}

}  // namespace ft::bench
