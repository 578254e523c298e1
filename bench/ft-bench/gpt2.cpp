// One step: zero_grad, forward and loss (linear_cross_entropy), backward, AdamW with clipping at
// global norm 1.0 (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on 2-D weights), on one fixed batch
// of random tokens below 50257, run by the Trainer (its batch uploaded every step, as in
// training). After the warm-up the timed steps report two times: the median of CUDA events
// around each step (the kernels alone: "gpu ms", which the RESULT line's ms= carries) and the
// wall clock per step (with the host's enqueueing and the batch upload: "wall ms"). Tokens/s
// and MFU (6·N + 6·L·C·T FLOPs per token against the device's dense bf16 peak, train/loop/mfu.h) are
// from the GPU median; peak memory is over the timed steps (the library's pool plus, with
// --graph, the memory the step's CUDA graph owns). With --data-parallel 1 the fused step is also
// timed data-parallel at world size 1 on NCCL (gradient buckets averaged while backward runs,
// inside the graph), plain and with ZeRO-1: what the data-parallel machinery costs a step.
#include "bench/ft-bench/gpt2.h"

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/ft-bench/trainer_timing.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/runtime.h"
#include "models/gpt2/gpt.h"
#include "models/llama/llama.h"
#include "optim/adamw.h"
#include "train/data/batch_source.h"
#include "train/distributed/data_parallel.h"
#include "train/loop/mfu.h"
#include "train/loop/trainer.h"

namespace ft::bench {

namespace {


struct Gpt2Result {
  double ms = 0, wall_ms = 0, tok_per_s = 0, final_loss = 0;
  std::optional<double> mfu;
  size_t peak_bytes = 0;
  bool replayed = false;
};

// The data-parallel variants of the step (world size 1 on NCCL).
enum class DpMode { None, Plain, Zero1 };
const char* dp_name(DpMode m) { return m == DpMode::None ? "" : m == DpMode::Plain ? "+dp" : "+zero1"; }

/// The bench's model: gpt2-124M's shape, or Llama-3.2-1B's, with `layers` layers.
std::unique_ptr<CausalLM> make_model(const Gpt2BenchOptions& o) {
  if (o.family == "llama") {
    FT_CHECK(o.shape == "1b" || o.shape == "8b", "ft-bench llama: --shape must be 1b or 8b, got '", o.shape, "'");
    LlamaConfig config = o.shape == "8b" ? LlamaConfig::llama_3_1_8b() : LlamaConfig::llama_3_2_1b();
    config.layers = o.layers;
    return std::make_unique<Llama>(config, 1234);
  }
  FT_CHECK(o.family == "gpt2", "ft-bench: unknown model family '", o.family, "'");
  return std::make_unique<GPT>(
      GPTConfig{.vocab = 50304, .block_size = 1024, .layers = o.layers, .heads = 12, .channels = 768}, 1234);
}

Gpt2Result measure(const Gpt2BenchOptions& o, KernelMode mode, DpMode dp_mode = DpMode::None,
                   Communicator* comm = nullptr) {
  KernelModeGuard guard(mode);
  const std::unique_ptr<CausalLM> owned = make_model(o);
  CausalLM& model = *owned;
  const CausalLMShape shape = model.shape();
  model.to(kCUDA, DType::BF16);
  if (o.lora) model.add_lora(*o.lora, model.lora_target_names(), 4321);
  model.set_recompute(parse_recompute(o.recompute, "ft-bench"));
  AdamW optimizer(model.parameters(),
                  AdamW::Options{.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                                 .policy = {.max_grad_norm = 1.0},
                                 .partition = {.shard_state = dp_mode == DpMode::Zero1}});
  std::unique_ptr<DataParallel> dp;
  if (dp_mode != DpMode::None) {
    dp = std::make_unique<DataParallel>(*comm, optimizer, DataParallel::Options{});
    dp->broadcast_parameters(model);
  }
  Generator gen(99);
  const double token_range = o.family == "gpt2" ? 50257.0 : static_cast<double>(shape.vocab);
  auto tokens = [&] { return (Tensor::rand({o.batch, o.seq}, gen) * token_range).to(DType::I64); };
  const Tensor ids = tokens(), targets = tokens();
  FixedBatchSource source({{"inputs", ids}, {"targets", targets}});
  // 2 FLOPs a parameter a token forward, 2 for the input gradient, 2 for its own gradient when it
  // trains (frozen ones have none), and the attention's 6·L·C·T.
  const double flops_per_token = 4.0 * static_cast<double>(model.parameter_count()) +
                                 2.0 * static_cast<double>(model.trainable_parameter_count()) +
                                 6.0 * static_cast<double>(shape.layers * shape.attention_width * o.seq);
  Trainer trainer(model, optimizer, source,
                  [&](Module&, const Batch& b) { return model.loss(b.at("inputs"), b.at("targets")); },
                  Trainer::Options{.schedule = {.max_lr = 6e-4},
                                   .log_every = 0,
                                   .unit = "tok",
                                   .items_per_batch = o.batch * o.seq,
                                   .warmup_steps = 0,  // the first fit() below is the warm-up
                                   .graph = o.graph,
                                   .window_loss = false,
                                   .data_parallel = dp.get()});
  const TimedSteps timed = time_trainer_steps(trainer, o.warmup, o.steps);
  Gpt2Result r;
  r.ms = timed.summary.step_ms;
  r.wall_ms = timed.summary.wall_ms;
  r.peak_bytes = timed.peak_bytes;
  r.final_loss = timed.summary.final_loss;
  r.replayed = timed.summary.replayed;
  r.tok_per_s = static_cast<double>(o.batch * o.seq) / (r.ms * 1e-3);
  r.mfu = mfu(flops_per_token, r.tok_per_s, device_peak_flops(kCUDA, DType::BF16));
  return r;
}

/// The workload's name in docs/workloads.md at its own shapes, else the shapes in the name, as
/// the peers (bench/peers/gpt2_torch.py, lora_torch.py, llama_torch.py) name theirs.
std::string plain_workload_name(const Gpt2BenchOptions& o) {
  const bool llama = o.family == "llama";
  const std::string base = llama ? "llama-" + o.shape : "gpt2-124M";
  const bool own_shape = llama ? (o.shape == "1b" && o.batch == 4 && o.seq == 2048 && o.layers == 16)
                               : (o.batch == 16 && o.seq == 1024 && o.layers == 12);
  char shapes[96];
  std::snprintf(shapes, sizeof shapes, " B%lld T%lld L%lld", static_cast<long long>(o.batch),
                static_cast<long long>(o.seq), static_cast<long long>(o.layers));
  if (!o.lora) return own_shape ? base : (llama ? base : "gpt2") + std::string(shapes);
  const std::string lora_base = llama ? "lora-llama-1b" : "lora-gpt2";
  if (own_shape && o.lora->rank == 16 && o.lora->dropout == 0) return lora_base;
  std::string out = lora_base + shapes + " r" + std::to_string(o.lora->rank);
  if (o.lora->dropout != 0) {
    char dropout[32];
    std::snprintf(dropout, sizeof dropout, " p%g", o.lora->dropout);
    out += dropout;
  }
  return out;
}

/// ... with " recompute MODE" when the layers run again in backward.
std::string workload_name(const Gpt2BenchOptions& o) {
  return plain_workload_name(o) + (o.recompute != "none" ? " recompute " + o.recompute : "");
}

}  // namespace

int run_gpt2_bench(const Gpt2BenchOptions& o, BenchReport& report) {
  const char* const model_text = o.family != "llama" ? "C=768 NH=12 V=50304"
                                 : o.shape == "8b"    ? "Llama-3.1-8B shape, C=4096 NH=32 NKV=8 I=14336 V=128256 untied"
                                                      : "Llama-3.2-1B shape, C=2048 NH=32 NKV=8 I=8192 V=128256 tied";
  // RESULT lines: gpt2, lora (gpt2's LoRA, as before llama came), llama, lora-llama.
  const std::string result_name = o.lora ? (o.family == "llama" ? "lora-llama" : "lora") : o.family;
  std::printf("ft-bench %s: L=%lld %s, B=%lld T=%lld, bf16, AdamW + clip, %d steps after %d warm-up, on %s\n",
              result_name.c_str(), static_cast<long long>(o.layers), model_text,
              static_cast<long long>(o.batch),
              static_cast<long long>(o.seq), o.steps, o.warmup, device_name().c_str());
  if (o.recompute != "none") std::printf("activations recomputed: --recompute %s\n", o.recompute.c_str());
  if (o.lora)
    std::printf("LoRA r=%lld alpha=%g dropout=%g on %s of every layer; the base frozen\n",
                static_cast<long long>(o.lora->rank), o.lora->alpha, o.lora->dropout,
                o.family == "llama" ? "q, k, v, o, gate, up and down_proj" : "qkv, attn_proj, fc and mlp_proj");
  struct Row {
    std::string name;
    Gpt2Result r;
  };
  std::vector<Row> rows;
  const bool run[2] = {o.kernels != "fused", o.kernels != "unfused"};  // unfused, fused
  // A variant that does not fit (out of memory, say) is reported and the others still run.
  auto attempt = [&](const std::string& name, const std::function<Gpt2Result()>& measure_it) {
    try {
      rows.push_back({name, measure_it()});
    } catch (const Error& e) {
      std::printf("kernels %s: did not run: %s\n", name.c_str(), e.what());
    }
    // What the variant's pool still caches goes back to the device, failed or not: the unfused
    // step leaves ~50 GB cached, and the next variant's graph (whose memory comes from a pool of
    // its own) could not be captured beside it.
    release_cached_memory();
    std::fflush(stdout);
  };
  for (int fused = 0; fused < 2; ++fused)
    if (run[fused])
      attempt(fused ? "fused" : "unfused", [&] { return measure(o, fused ? KernelMode::Fused : KernelMode::Unfused); });
  const KernelMode dp_mode = run[1] ? KernelMode::Fused : KernelMode::Unfused;
  std::unique_ptr<Communicator> comm;
  if (o.data_parallel) {
    LaunchEnv env;
    env.launcher = "torchrun";
    comm = make_communicator(env, kCUDA, {});
    for (DpMode dp : {DpMode::Plain, DpMode::Zero1})
      attempt(std::string(kernel_mode_name(dp_mode)) + dp_name(dp), [&] { return measure(o, dp_mode, dp, comm.get()); });
  }
  std::printf("\n%-14s %10s %10s %12s %8s %12s %10s %8s\n", "kernels", "gpu ms", "wall ms", "tok/s (gpu)", "MFU",
              "peak GB", "loss", "graph");
  for (auto it = rows.begin(); it != rows.end(); ++it) {
    const Gpt2Result& r = it->r;
    const double peak_gb = static_cast<double>(r.peak_bytes) / 1e9;
    char mfu_text[16] = "?";
    if (r.mfu) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100.0 * *r.mfu);
    std::printf("%-14s %10.2f %10.2f %12.0f %8s %12.2f %10.4f %8s\n", it->name.c_str(), r.ms, r.wall_ms, r.tok_per_s,
                mfu_text, peak_gb, r.final_loss, r.replayed ? "replay" : "eager");
    if (r.mfu) std::snprintf(mfu_text, sizeof mfu_text, "%.4f", *r.mfu);
    std::printf("RESULT %s kernels=%s graph=%d ms=%.3f wall_ms=%.3f tok_per_s=%.0f mfu=%s peak_gb=%.3f\n",
                result_name.c_str(), it->name.c_str(), r.replayed ? 1 : 0, r.ms, r.wall_ms, r.tok_per_s, mfu_text,
                peak_gb);
    report.add(workload_name(o), it->name, r.ms,
               {{"graph", r.replayed ? 1.0 : 0.0}, {"wall_ms", r.wall_ms}, {"tok_per_s", r.tok_per_s}, {"peak_gb", peak_gb}});
  }
  std::printf("(gpu ms: median of CUDA events around each step, the kernels alone; wall ms: wall clock per step)\n");
  auto row = [&](const std::string& name) -> const Gpt2Result* {
    for (const Row& r : rows)
      if (r.name == name) return &r.r;
    return nullptr;
  };
  if (row("fused") && row("unfused"))
    std::printf("fused vs unfused: %.2fx\n", row("unfused")->ms / row("fused")->ms);
  const std::string plain_name = kernel_mode_name(dp_mode);
  if (o.data_parallel && row(plain_name))
    for (DpMode dp : {DpMode::Plain, DpMode::Zero1})
      if (const Gpt2Result* r = row(plain_name + dp_name(dp)))
        std::printf("%s%s vs %s: %.4fx the step time (NCCL at world size 1)\n", plain_name.c_str(), dp_name(dp),
                    plain_name.c_str(), r->ms / row(plain_name)->ms);
  return 0;
}

}  // namespace ft::bench
