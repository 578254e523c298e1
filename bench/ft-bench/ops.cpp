// ft-bench ops: each memory-bound fused op, forward + backward, on the GPT-2 shapes of
// docs/workloads.md, in both kernel modes. Prints the median time, the achieved bandwidth on the
// fewest bytes the measured work must move, its share of the device's measured copy bandwidth
// (bandwidth.h, printed first), and the fused/unfused ratio. Gradients are taken as
// torch.autograd.grad takes them (ft::gradients), so the time is the op's own: no copy of a
// gradient into a leaf's .grad().
#include "bench/ft-bench/ops.h"

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/ft-bench/attention.h"
#include "bench/ft-bench/bandwidth.h"
#include "bench/ft-bench/dlrm.h"
#include "bench/ft-bench/gemm_ops.h"
#include "bench/ft-bench/graph_timer.h"
#include "bench/ft-bench/lora_ops.h"
#include "bench/ft-bench/swiglu_ops.h"
#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bias_act/bias_act.h"
#include "lib/ops/cross_entropy/cross_entropy.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/random/random.h"
#include "lib/ops/rope/rope.h"

namespace ft::bench {

namespace {


struct OpCase {
  std::string name;
  double fewest_bytes;  // each input read once, each output written once, forward + backward
  std::string bytes_note;
  std::function<std::function<void()>()> make;  // builds inputs, returns the fwd+bwd work
};

Tensor leaf(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::randn(shape, gen, DType::BF16, kCUDA);
  t.requires_grad_();
  return t;
}

std::vector<OpCase> cases(int64_t n, int64_t c, int64_t vocab) {
  const double row = static_cast<double>(n * c) * 2.0;  // one bf16 [N, C] tensor
  std::vector<OpCase> out;
  out.push_back({"residual+layernorm", 7 * row,
                 "fwd reads x, residual, writes sum, out; bwd reads dy, out, writes dx (= dresidual)", [=] {
                   Generator gen(1);
                   Tensor x = leaf({n, c}, gen), r = leaf({n, c}, gen), w = leaf({c}, gen), b = leaf({c}, gen);
                   Tensor dy = Tensor::randn({n, c}, gen, DType::BF16, kCUDA);
                   return std::function<void()>([=] { gradients(add_layer_norm(x, r, w, b).out, dy, {x, r, w, b}); });
                 }});
  out.push_back({"bias+gelu (4C)", 5 * 4 * row, "fwd reads x, writes y; bwd reads dy, x, writes dx", [=] {
                   Generator gen(2);
                   Tensor x = leaf({n, 4 * c}, gen), b = leaf({4 * c}, gen);
                   Tensor dy = Tensor::randn({n, 4 * c}, gen, DType::BF16, kCUDA);
                   return std::function<void()>([=] { gradients(bias_act(x, b, Activation::GELU), dy, {x, b}); });
                 }});
  out.push_back({"bias+dropout+residual", 5 * row,
                 "fwd reads x, residual, writes out; bwd reads dy, writes dx (dresidual is dy)", [=] {
                   Generator gen(3);
                   Tensor x = leaf({n, c}, gen), r = leaf({n, c}, gen), b = leaf({c}, gen);
                   Tensor dy = Tensor::randn({n, c}, gen, DType::BF16, kCUDA);
                   return std::function<void()>([=] {
                     Tensor offset = PhiloxCounter::on(kCUDA).take(static_cast<uint64_t>(n * c));
                     gradients(bias_dropout_add(x, b, r, 0.1, 1234, offset), dy, {x, r, b});
                   });
                 }});
  out.push_back({"cross-entropy V=" + std::to_string(vocab), 2.0 * static_cast<double>(n * vocab) * 2.0,
                 "reads logits, writes dlogits", [=] {
                   Generator gen(4);
                   Tensor logits = leaf({n, vocab}, gen);
                   std::vector<double> ids(static_cast<size_t>(n));
                   for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<double>((i * 7919) % vocab);
                   Tensor targets = Tensor::from_vector(ids, {n}, DType::I64, kCUDA);
                   Tensor one = Tensor::full({}, 1.0, DType::F32, kCUDA);
                   return std::function<void()>([=] { gradients(cross_entropy(logits, targets), one, {logits}); });
                 }});
  // Queries of heads of 64 (GPT-2's) as [B, T, NH, HS], T 1024 when the rows allow.
  const int64_t tokens = n % 1024 == 0 ? 1024 : n;
  if (c % 64 == 0)
    out.push_back({"rope (HS 64)", 4 * row, "fwd reads x, writes y; bwd reads dy, writes dx", [=] {
                     Generator gen(5);
                     const Shape shape{n / tokens, tokens, c / 64, 64};
                     Tensor x = leaf(shape, gen);
                     Tensor dy = Tensor::randn(shape, gen, DType::BF16, kCUDA);
                     rope(x.detach());  // makes the cos and sin tables before the graph is captured
                     return std::function<void()>([=] { gradients(rope(x), dy, {x}); });
                   }});
  return out;
}

// linear, fwd+bwd: the cuBLASLt epilogue path, matmul then the fused bias_act kernel,
// and the twin, on the shapes the models use.
void linear_strategy_table(const OpsBenchOptions& options) {
  struct Shape3 {
    int64_t rows, in, out;
    Activation act;
  };
  const Shape3 shapes[] = {{options.rows, options.channels, 4 * options.channels, Activation::GELU},
                           {options.rows, 4 * options.channels, options.channels, Activation::None},
                           {4096, 1024, 1024, Activation::None},
                           {4096, 1024, 1024, Activation::GELU}};
  std::printf("\n%-34s %12s %16s %10s %10s\n", "linear fwd+bwd (graph ms)", "epilogue", "matmul+bias_act", "twin",
              "faster");
  for (const Shape3& s : shapes) {
    Generator gen(5);
    Tensor x = leaf({s.rows, s.in}, gen), w = leaf({s.out, s.in}, gen), b = leaf({s.out}, gen);
    Tensor dy = Tensor::randn({s.rows, s.out}, gen, DType::BF16, kCUDA);
    auto work = [=] {
      linear(x, w, b, s.act).backward(dy);
      for (const Tensor& t : {x, w, b}) t.zero_grad();
    };
    double ms[3];
    const LinearFusion fusions[3] = {LinearFusion::Epilogue, LinearFusion::MatmulBiasAct, LinearFusion::Auto};
    for (int k = 0; k < 3; ++k) {
      KernelModeGuard guard(k == 2 ? KernelMode::Unfused : KernelMode::Fused);
      set_linear_fusion(fusions[k]);
      ms[k] = time_device_work(work, options.warmup, options.iterations).graph_ms;
    }
    set_linear_fusion(LinearFusion::Auto);
    char name[64];
    std::snprintf(name, sizeof name, "%lldx%lld->%lld %s", static_cast<long long>(s.rows), static_cast<long long>(s.in),
                  static_cast<long long>(s.out), activation_name(s.act));
    std::printf("%-34s %12.3f %16.3f %10.3f %10s\n", name, ms[0], ms[1], ms[2],
                ms[0] <= ms[1] ? "epilogue" : "matmul+ba");
    std::printf("RESULT linear=%s epilogue_ms=%.4f matmul_bias_act_ms=%.4f twin_ms=%.4f\n", name, ms[0], ms[1], ms[2]);
  }
}

}  // namespace

int run_ops_bench(const OpsBenchOptions& options, BenchReport& report) {
  std::printf("ft-bench ops: N=%lld rows, C=%lld, V=%lld, bf16, forward+backward, %d iterations after %d warm-up\n",
              static_cast<long long>(options.rows), static_cast<long long>(options.channels),
              static_cast<long long>(options.vocab), options.iterations, options.warmup);
  // The ceiling of every "% peak" below (and of the adamw and dlrm tables).
  std::printf("memory ceiling: a device-to-device copy of 1 GiB runs at %.0f GB/s (read and write counted)\n",
              copy_bandwidth() / 1e9);
  std::printf("RESULT copy_bandwidth_gbps=%.1f\n", copy_bandwidth() / 1e9);
  struct Row {
    std::string name, note;
    double bytes;
    Timing t[2];
  };
  std::vector<Row> rows;
  for (const OpCase& op : cases(options.rows, options.channels, options.vocab)) {
    if (!options.only.empty() && op.name.find(options.only) == std::string::npos) continue;
    Row row{op.name, op.bytes_note, op.fewest_bytes, {}};
    for (int m = 0; m < 2; ++m) {
      KernelModeGuard guard(m == 0 ? KernelMode::Unfused : KernelMode::Fused);
      std::function<void()> work = op.make();
      row.t[m] = time_device_work(work, options.warmup, options.iterations, m == 1 ? options.batched : 1);
    }
    rows.push_back(row);
    std::fflush(stdout);
  }
  std::printf("\n%-24s %10s %10s %10s %10s %9s %8s %9s\n", "op (fwd+bwd)", "MB", "unfused", "fused", "fused",
              "GB/s", "% peak", "speed-up");
  std::printf("%-24s %10s %10s %10s %10s %9s %8s %9s\n", "", "fewest", "graph ms", "graph ms", "eager ms", "fused",
              "fused", "fused");
  for (const Row& r : rows) {
    const double fused_ms = r.t[1].graph_ms, unfused_ms = r.t[0].graph_ms;
    const double gbps = fused_ms > 0 ? r.bytes / (fused_ms * 1e-3) / 1e9 : 0.0;
    std::printf("%-24s %10.1f %10.3f %10.3f %10.3f %9.0f %7.1f%% %8.2fx\n", r.name.c_str(), r.bytes / 1e6, unfused_ms,
                fused_ms, r.t[1].eager_ms, gbps, percent_of_copy(gbps * 1e9),
                fused_ms > 0 ? unfused_ms / fused_ms : 0.0);
  }
  if (options.batched > 1) {
    // Inside a training step's graph an op pays no graph launch and shares its first and last
    // kernels' ramps with its neighbours; one call a replay pays them in full.
    std::printf("\n%-24s %12s %9s %8s   (fused, %d calls in one graph, per call)\n", "op (fwd+bwd)", "graph ms",
                "GB/s", "% peak", options.batched);
    for (const Row& r : rows) {
      const double ms = r.t[1].batched_graph_ms;
      const double gbps = ms > 0 ? r.bytes / (ms * 1e-3) / 1e9 : 0.0;
      std::printf("%-24s %12.4f %9.0f %7.1f%%\n", r.name.c_str(), ms, gbps, percent_of_copy(gbps * 1e9));
    }
  }
  std::printf("\nbytes counted:\n");
  for (const Row& r : rows) std::printf("  %-24s %s\n", r.name.c_str(), r.note.c_str());
  if (options.only.empty() || std::string("linear").find(options.only) != std::string::npos)
    linear_strategy_table(options);
  if (options.only.empty() || std::string("attention").find(options.only) != std::string::npos)
    attention_table(options, report);
  if (options.only.empty() || std::string("gqa rope").find(options.only) != std::string::npos)
    grouped_rope_table(options, report);
  if (options.only.empty() || std::string("lora").find(options.only) != std::string::npos) lora_table(options);
  if (options.only.empty() || std::string("swiglu down").find(options.only) != std::string::npos)
    swiglu_down_table(options);
  if (options.only.empty() || std::string("gemm").find(options.only) != std::string::npos) gemm_table(options);
  if (options.only.empty() || std::string("embedding_bag dlrm").find(options.only) != std::string::npos)
    dlrm_ops_table({.warmup = options.warmup, .steps = options.iterations});
  for (const Row& r : rows)
    for (int m = 0; m < 2; ++m)
      report.add(r.name, m ? "fused" : "unfused", r.t[m].graph_ms, {{"graph", 1}, {"eager_ms", r.t[m].eager_ms}});
  for (const Row& r : rows)
    std::printf("RESULT op=%s fused_ms=%.4f unfused_ms=%.4f fused_eager_ms=%.4f unfused_eager_ms=%.4f "
                "fused_batched_ms=%.4f\n",
                r.name.c_str(), r.t[1].graph_ms, r.t[0].graph_ms, r.t[1].eager_ms, r.t[0].eager_ms,
                r.t[1].batched_graph_ms);
  return 0;
}

}  // namespace ft::bench
