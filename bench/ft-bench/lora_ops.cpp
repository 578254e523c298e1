#include "bench/ft-bench/lora_ops.h"

#include <cstdio>

#include "bench/ft-bench/graph_timer.h"
#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/lora_linear/lora_linear.h"
#include "lib/ops/random/random.h"

namespace ft::bench {

void lora_table(const OpsBenchOptions& options) {
  struct Case {
    const char* name;
    int64_t in, out;
    bool bias;
    Activation act;
  };
  const int64_t c = options.channels;
  const Case shapes[] = {{"qkv", c, 3 * c, true, Activation::None},
                         {"attn_proj", c, c, true, Activation::None},
                         {"fc", c, 4 * c, true, Activation::GELU},
                         {"mlp_proj", 4 * c, c, true, Activation::None},
                         {"4096", 4096, 4096, false, Activation::None}};
  struct Variant {
    int64_t rank;
    double dropout;
  };
  const Variant variants[] = {{8, 0.0}, {16, 0.0}, {64, 0.0}, {16, 0.1}};
  std::printf("\nlora_linear fwd+bwd (dx, dA, dB), %lld rows, graph ms; base = the frozen linear alone (fwd + dx)\n",
              static_cast<long long>(options.rows));
  std::printf("%-22s %5s %6s %9s %9s %9s %11s %11s\n", "shape", "r", "p", "base", "fused", "twin", "fused/base",
              "twin/fused");
  for (const Case& s : shapes) {
    Generator gen(11);
    const int64_t m = options.rows;
    Tensor x = Tensor::randn({m, s.in}, gen, DType::BF16, kCUDA);
    x.requires_grad_();
    const Tensor w = Tensor::randn({s.out, s.in}, gen, DType::BF16, kCUDA) * 0.02;
    const Tensor b = s.bias ? Tensor::randn({s.out}, gen, DType::BF16, kCUDA) : Tensor();
    const Tensor dy = Tensor::randn({m, s.out}, gen, DType::BF16, kCUDA);
    double base_ms = 0;
    {
      KernelModeGuard guard(KernelMode::Fused);
      base_ms = time_device_work([&] { gradients(linear(x, w, b, s.act), dy, {x}); }, options.warmup,
                                 options.iterations)
                    .graph_ms;
    }
    char shape_name[48];
    std::snprintf(shape_name, sizeof shape_name, "%s %lld->%lld%s", s.name, static_cast<long long>(s.in),
                  static_cast<long long>(s.out), s.act == Activation::GELU ? " gelu" : "");
    for (const Variant& v : variants) {
      // Random, not zero, adapters: B = 0 would be a new adapter, not one being trained.
      Tensor a = Tensor::randn({v.rank, s.in}, gen, DType::BF16, kCUDA) * 0.05;
      Tensor bl = Tensor::randn({s.out, v.rank}, gen, DType::BF16, kCUDA) * 0.05;
      a.requires_grad_();
      bl.requires_grad_();
      auto work = [&] {
        LoRAOptions o{.scale = 2.0, .dropout = v.dropout, .seed = 99, .activation = s.act};
        if (v.dropout > 0) o.offset = PhiloxCounter::on(kCUDA).take(static_cast<uint64_t>(m * s.in));
        gradients(lora_linear(x, w, b, a, bl, o), dy, {x, a, bl});
      };
      double ms[2];
      for (int fused = 0; fused < 2; ++fused) {
        KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
        ms[fused] = time_device_work(work, options.warmup, options.iterations).graph_ms;
      }
      std::printf("%-22s %5lld %6.2f %9.3f %9.3f %9.3f %10.2fx %10.2fx\n", shape_name, static_cast<long long>(v.rank),
                  v.dropout, base_ms, ms[1], ms[0], ms[1] / base_ms, ms[0] / ms[1]);
      std::printf("RESULT lora_linear=%s,%lld,%lld rank=%lld dropout=%.2f base_ms=%.4f fused_ms=%.4f twin_ms=%.4f\n",
                  s.name, static_cast<long long>(s.in), static_cast<long long>(s.out), static_cast<long long>(v.rank),
                  v.dropout, base_ms, ms[1], ms[0]);
      std::fflush(stdout);
    }
  }
}

}  // namespace ft::bench
