#include "bench/ft-bench/attention.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "bench/ft-bench/graph_timer.h"
#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/attention/attention.h"
#include "lib/ops/rope/rope.h"

namespace ft::bench {

void attention_table(const OpsBenchOptions& options, BenchReport& report) {
  struct Case {
    int64_t batch, heads, tokens, head_size;
  };
  const Case cases[] = {{16, 12, 1024, 64}, {16, 6, 1024, 128}};
  std::printf("\n%-28s %9s %9s %9s %9s %9s %9s %9s\n", "causal attention (graph ms)", "mode", "fwd", "fwd+bwd", "bwd",
              "fwd TF/s", "bwd TF/s", "fused x");
  for (const Case& c : cases) {
    Generator gen(7);
    const Shape shape{c.batch, c.heads, c.tokens, c.head_size};
    auto leaf = [&] {
      Tensor t = Tensor::randn(shape, gen, DType::BF16, kCUDA);
      t.requires_grad_();
      return t;
    };
    const Tensor q = leaf(), k = leaf(), v = leaf(), dy = Tensor::randn(shape, gen, DType::BF16, kCUDA);
    const double fwd_flops = 4.0 * static_cast<double>(c.batch * c.heads) * static_cast<double>(c.tokens) *
                             static_cast<double>(c.tokens) * static_cast<double>(c.head_size) / 2.0;
    // The twin, the fused path as it runs by default (the Hopper forward on sm_90), and on sm_90
    // also the fused path on the mma.sync forward: the Hopper kernel's gain on its own line.
    struct Variant {
      const char* name;    // in the table
      const char* report;  // in the JSON, as the peers name variants
      KernelMode mode;
      FlashKernels forward;
      int batched = 1;  // also timed as this many calls in one graph
    };
    std::vector<Variant> variants = {{"twin", "unfused", KernelMode::Unfused, FlashKernels::PreferHopper},
                                     {"fused", "fused", KernelMode::Fused, FlashKernels::PreferHopper, options.batched}};
    if (hopper_flash_available())
      variants.push_back({"mma.sync", "fused mma.sync", KernelMode::Fused, FlashKernels::MmaSync});
    std::vector<double> fwd_ms, total_ms;
    // The default fused path is also timed as `batched` calls in one graph, per call: the GPU
    // time of a call without the graph's launch, as the peer's SDPA
    // figures are taken from back-to-back calls (bench/peers/ops_torch.py).
    double batched_fwd_ms = 0, batched_total_ms = 0;
    for (const Variant& variant : variants) {
      KernelModeGuard guard(variant.mode);
      const FlashKernels saved = flash_kernels();
      set_flash_kernels(variant.forward);
      const Timing fwd = time_device_work(
          [&] {
            NoGradGuard no_grad;
            attention(q, k, v, true);
          },
          options.warmup, options.iterations, variant.batched);
      const Timing total = time_device_work([&] { gradients(attention(q, k, v, true), dy, {q, k, v}); },
                                            options.warmup, options.iterations, variant.batched);
      fwd_ms.push_back(fwd.graph_ms);
      total_ms.push_back(total.graph_ms);
      if (variant.batched > 1) batched_fwd_ms = fwd.batched_graph_ms, batched_total_ms = total.batched_graph_ms;
      set_flash_kernels(saved);
    }
    char name[64];
    std::snprintf(name, sizeof name, "B%lld NH%lld T%lld HS%lld", static_cast<long long>(c.batch),
                  static_cast<long long>(c.heads), static_cast<long long>(c.tokens),
                  static_cast<long long>(c.head_size));
    for (size_t i = 1; i <= variants.size(); ++i) {
      const size_t at = i % variants.size();  // fused first, the twin last
      const double bwd = total_ms[at] - fwd_ms[at];
      std::printf("%-28s %9s %9.3f %9.3f %9.3f %9.1f %9.1f %9s\n", i == 1 ? name : "", variants[at].name, fwd_ms[at],
                  total_ms[at], bwd, fwd_flops / (fwd_ms[at] * 1e-3) / 1e12, 2.5 * fwd_flops / (bwd * 1e-3) / 1e12,
                  "");
    }
    std::printf("%-28s %9s %9.2fx %8.2fx\n", "", "twin/fused", fwd_ms[0] / fwd_ms[1], total_ms[0] / total_ms[1]);
    if (batched_fwd_ms > 0 && batched_total_ms > batched_fwd_ms) {
      const double bwd = batched_total_ms - batched_fwd_ms;
      std::printf("%-28s %9s %9.3f %9.3f %9.3f %9.1f %9.1f   (fused, %d calls in one graph, per call)\n", "",
                  "batched", batched_fwd_ms, batched_total_ms, bwd, fwd_flops / (batched_fwd_ms * 1e-3) / 1e12,
                  2.5 * fwd_flops / (bwd * 1e-3) / 1e12, options.batched);
      std::printf("RESULT attention=HS%lld fused_batched_fwd_ms=%.4f fused_batched_total_ms=%.4f "
                  "fused_batched_fwd_tflops=%.1f fused_batched_bwd_tflops=%.1f\n",
                  static_cast<long long>(c.head_size), batched_fwd_ms, batched_total_ms,
                  fwd_flops / (batched_fwd_ms * 1e-3) / 1e12, 2.5 * fwd_flops / (bwd * 1e-3) / 1e12);
    }
    std::printf("RESULT attention=HS%lld fused_fwd_ms=%.4f fused_total_ms=%.4f twin_fwd_ms=%.4f twin_total_ms=%.4f "
                "fused_fwd_tflops=%.1f fused_bwd_tflops=%.1f\n",
                static_cast<long long>(c.head_size), fwd_ms[1], total_ms[1], fwd_ms[0], total_ms[0],
                fwd_flops / (fwd_ms[1] * 1e-3) / 1e12, 2.5 * fwd_flops / ((total_ms[1] - fwd_ms[1]) * 1e-3) / 1e12);
    for (size_t i = 0; i < variants.size(); ++i)
      report.add("attention HS" + std::to_string(c.head_size), variants[i].report, total_ms[i],
                 {{"graph", 1}, {"forward_ms", fwd_ms[i]}});
    std::fflush(stdout);
  }
}

void grouped_rope_table(const OpsBenchOptions& options, BenchReport& report) {
  struct Case {
    int64_t batch, heads, kv_heads, tokens, head_size;
  };
  const Case cases[] = {{4, 32, 8, 2048, 64}, {1, 32, 8, 4096, 128}};
  const RopeConfig llama3{.theta = 500000.0, .factor = 8.0};
  KernelModeGuard fused(KernelMode::Fused);
  std::printf("\n%-30s %-18s %9s %9s %9s\n", "gqa+rope, fused (graph ms)", "variant", "fwd", "fwd+bwd", "bwd");
  for (const Case& c : cases) {
    Generator gen(9);
    auto leaf = [&](int64_t heads) {
      Tensor t = Tensor::randn({c.batch, c.tokens, heads * c.head_size}, gen, DType::BF16, kCUDA);
      t.requires_grad_();
      return t;
    };
    const Tensor q = leaf(c.heads), k = leaf(c.kv_heads), v = leaf(c.kv_heads);
    const Tensor dy = Tensor::randn(q.shape(), gen, DType::BF16, kCUDA);
    struct Variant {
      const char* name;
      std::optional<RopeConfig> rope;
    };
    const Variant variants[] = {{"rope", llama3}, {"no rope", std::nullopt}};
    rope(q.detach().reshape({c.batch, c.tokens, c.heads, c.head_size}), llama3);  // the tables, before a capture
    char name[64];
    std::snprintf(name, sizeof name, "B%lld T%lld NH%lld/%lld HS%lld", static_cast<long long>(c.batch),
                  static_cast<long long>(c.tokens), static_cast<long long>(c.heads), static_cast<long long>(c.kv_heads),
                  static_cast<long long>(c.head_size));
    for (const Variant& variant : variants) {
      auto run = [&] { return grouped_query_attention(q, k, v, c.heads, c.kv_heads, true, variant.rope); };
      const Timing fwd = time_device_work(
          [&] {
            NoGradGuard no_grad;
            run();
          },
          options.warmup, options.iterations);
      const Timing total =
          time_device_work([&] { gradients(run(), dy, {q, k, v}); }, options.warmup, options.iterations);
      std::printf("%-30s %-18s %9.3f %9.3f %9.3f\n", &variant == variants ? name : "", variant.name, fwd.graph_ms,
                  total.graph_ms, total.graph_ms - fwd.graph_ms);
      std::printf("RESULT gqa_rope=HS%lld variant=%s fwd_ms=%.4f total_ms=%.4f\n", static_cast<long long>(c.head_size),
                  variant.name, fwd.graph_ms, total.graph_ms);
      report.add("gqa+rope HS" + std::to_string(c.head_size), variant.name, total.graph_ms,
                 {{"graph", 1}, {"forward_ms", fwd.graph_ms}});
    }
    std::fflush(stdout);
  }
}

}  // namespace ft::bench
