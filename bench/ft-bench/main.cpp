// ft-bench: measurements on the GPU, printed as tables. Subcommands:
//   ft-bench ops    the memory-bound fused ops (fwd+bwd) in both kernel modes
//   ft-bench adamw  one optimizer step over gpt2-124M's parameters (f32, and bf16 with masters), fused vs twin
//   ft-bench gpt2   whole gpt2-124M training steps in both kernel modes
//   ft-bench lora   the same steps as LoRA fine-tuning (lora-gpt2)
//   ft-bench llama  whole steps of a Llama-3.2-1B-shaped model, full or LoRA (llama-1b, lora-llama-1b)
//   ft-bench mlp    whole mlp-fmnist training steps in both kernel modes
//   ft-bench dlrm   whole DLRM training steps (dlrm-kaggle, dlrm-mlperf) and the embedding bag's kernels
// Each takes --peers (the PyTorch peers' JSON, printed beside ours) and --json (ours, as JSON).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "bench/ft-bench/adamw.h"
#include "bench/ft-bench/dlrm.h"
#include "bench/ft-bench/gpt2.h"
#include "bench/ft-bench/mlp.h"
#include "bench/ft-bench/ops.h"
#include "bench/ft-bench/report.h"
#include "examples/common/cli.h"
#include "lib/runtime.h"

namespace {

void add_report_flags(ft::cli::Args& args) {
  args.flag("peers", "", "comma-separated results files the PyTorch peers wrote (bench/peers/*.py --json) on this GPU:\n"
                         "their times are printed beside fused and unfused, workload by workload");
  args.flag("json", "", "also write this run's results to the file as JSON (scripts/plot.py bench draws it):\n"
                        "{\"device\", \"date\", \"results\": [{\"workload\", \"variant\": \"fused\"|\"unfused\", \"ms\", ...}]}");
}

// The report a subcommand adds its results to, with the peers' files read before anything is
// timed, so a bad file fails in a second rather than after the benchmark.
ft::bench::BenchReport open_report(const ft::cli::Args& args) {
  ft::bench::BenchReport report(ft::device_name(), ft::bench::utc_date_today());
  const std::string peers = args.str("peers");
  for (size_t start = 0; start < peers.size();) {
    const size_t comma = std::min(peers.find(',', start), peers.size());
    if (comma > start) report.add_peers(peers.substr(start, comma - start));
    start = comma + 1;
  }
  return report;
}

int close_report(const ft::cli::Args& args, const ft::bench::BenchReport& report, int rc) {
  const std::string table = report.side_by_side();
  if (!table.empty()) std::printf("\nside by side (%s, %s):\n%s", report.ours().device.c_str(), report.ours().date.c_str(), table.c_str());
  if (!args.str("json").empty()) {
    report.write_json(args.str("json"));
    std::printf("wrote %s\n", args.str("json").c_str());
  }
  return rc;
}

// The flags every whole-step bench (gpt2, lora, dlrm, mlp) takes.
struct StepFlags {
  int warmup = 0, steps = 0;
  std::string kernels;
  bool graph = false;
};

void add_step_flags(ft::cli::Args& args, const char* steps, const char* warmup, const char* kernels, const char* graph,
                    const char* graph_note = "") {
  args.flag("steps", steps, "timed steps (median reported)");
  args.flag("warmup", warmup, "untimed steps first");
  args.flag("kernels", kernels, "fused, unfused or both");
  args.flag("graph", graph, std::string("1: replay each step from a CUDA graph captured after the warm-up") + graph_note);
  ft::cli::add_gemm_tuning_flag(args);  // as the training binaries, so their steps are the ones timed
}

StepFlags read_step_flags(const ft::cli::Args& args) {
  StepFlags f{.warmup = static_cast<int>(args.integer("warmup", 0)), .steps = static_cast<int>(args.integer("steps", 1)),
              .kernels = args.str("kernels"), .graph = args.integer("graph", 0) != 0};
  FT_CHECK(f.kernels == "fused" || f.kernels == "unfused" || f.kernels == "both",
           "ft-bench: --kernels must be fused, unfused or both, got '", f.kernels, "'");
  ft::cli::apply_gemm_tuning_flag(args, "ft-bench");
  return f;
}

// Adds --peers and --json, parses, and opens the report; nullopt after --help.
std::optional<ft::bench::BenchReport> parse_and_open(ft::cli::Args& args, int argc, char** argv) {
  add_report_flags(args);
  if (!args.parse(argc - 1, argv + 1)) return std::nullopt;
  FT_CHECK(ft::cuda_available(), "ft-bench: needs a CUDA GPU");
  return open_report(args);
}

int run_ops(int argc, char** argv) {
  ft::cli::Args args("ft-bench ops",
                     "Times each memory-bound fused op (forward + backward) on GPT-2 shapes in both kernel modes,\n"
                     "and prints bandwidth against the device's copy bandwidth, measured first (a device-to-device\n"
                     "copy of 1 GiB, read and write counted).");
  args.flag("rows", "16384", "rows N (B·T)");
  args.flag("channels", "768", "channels C");
  args.flag("vocab", "50304", "vocabulary V for cross-entropy");
  args.flag("iterations", "20", "timed iterations (median reported)");
  args.flag("warmup", "3", "untimed iterations first");
  args.flag("batched", "10", "also time each fused op as this many calls in one graph, per call: its cost inside a\n"
                             "training step's graph, without one replay's launch and ramps (1: not)");
  args.flag("only", "", "run only the ops whose name contains this text (for a profiler run); 'linear', 'attention',\n"
                        "'gqa' (grouped-query attention with RoPE at Llama's shapes), 'lora', 'swiglu' (a Llama MLP's\n"
                        "down projection, swiglu_linear), 'gemm' (our Hopper product against cuBLASLt) or 'dlrm' (the\n"
                        "embedding bag and interaction at dlrm-kaggle shapes) for that table alone");
  ft::cli::add_gemm_tuning_flag(args);  // the linear, LoRA and DLRM tables run products
  std::optional<ft::bench::BenchReport> report = parse_and_open(args, argc, argv);
  if (!report) return 0;
  ft::cli::apply_gemm_tuning_flag(args, "ft-bench");
  ft::bench::OpsBenchOptions o;
  o.only = args.str("only");
  o.rows = args.integer("rows", 1);
  o.channels = args.integer("channels", 1);
  o.vocab = args.integer("vocab", 0);
  o.iterations = static_cast<int>(args.integer("iterations", 1));
  o.warmup = static_cast<int>(args.integer("warmup", 0));
  o.batched = static_cast<int>(args.integer("batched", 1));
  return close_report(args, *report, ft::bench::run_ops_bench(o, *report));
}

int run_adamw(int argc, char** argv) {
  ft::cli::Args args("ft-bench adamw", "Times one AdamW step over the 148 parameter tensors of gpt2-124M (124.5M parameters,\n"
                                       "f32 gradients): fused multi-tensor on f32 parameters, the same with norm + clipping,\n"
                                       "on bf16 parameters with f32 masters as in the gpt2 step, and the per-tensor twin.");
  args.flag("iterations", "50", "timed iterations (median reported)");
  args.flag("warmup", "5", "untimed iterations first");
  std::optional<ft::bench::BenchReport> report = parse_and_open(args, argc, argv);
  if (!report) return 0;
  return close_report(args, *report,
                      ft::bench::run_adamw_bench({.warmup = static_cast<int>(args.integer("warmup", 0)),
                                                  .iterations = static_cast<int>(args.integer("iterations", 1))},
                                                 *report));
}

// ft-bench gpt2, lora and llama share their flags; lora (and llama --lora 1) adds the adapters'
// and defaults to the lora-gpt2 (lora-llama-1b) workload: r = 16 on every linear of every block
// the family names, the base frozen.
int run_gpt2(int argc, char** argv, bool lora) {
  ft::cli::Args args(lora ? "ft-bench lora" : "ft-bench gpt2",
                     lora ? "Times whole LoRA fine-tuning steps of gpt2-124M (the lora-gpt2 workload: adapters on\n"
                            "qkv, attn_proj, fc and mlp_proj of every block, the bf16 base frozen, AdamW on the\n"
                            "adapters) on random tokens: ms/step, tok/s, MFU, peak device memory."
                          : "Times whole gpt2-124M training steps (forward, loss, backward, clipping, AdamW) on\n"
                            "random tokens in both kernel modes: ms/step, tok/s, MFU, peak device memory.");
  args.flag("batch", "16", "sequences per step (B)");
  args.flag("seq", "1024", "tokens per sequence (T)");
  args.flag("layers", "12", "transformer blocks (12 is gpt2-124M)");
  add_step_flags(args, "10", "3", lora ? "fused" : "both", lora ? "1" : "0");
  args.flag("data-parallel", "0", "1: also time the step data-parallel at world size 1 on NCCL (gradient buckets\n"
                                  "averaged during backward), plain and ZeRO-1, against the step without");
  if (lora) {
    args.flag("rank", "16", "the adapters' rank r");
    args.flag("alpha", "32", "LoRA's alpha (the update is alpha/r * B*A)");
    args.flag("dropout", "0", "dropout on the adapters' input");
  }
  std::optional<ft::bench::BenchReport> report = parse_and_open(args, argc, argv);
  if (!report) return 0;
  const StepFlags step = read_step_flags(args);
  ft::bench::Gpt2BenchOptions options{.batch = args.integer("batch", 1), .seq = args.integer("seq", 1),
                                      .layers = args.integer("layers", 1),
                                      .warmup = step.warmup, .steps = step.steps, .kernels = step.kernels,
                                      .graph = step.graph,
                                      .data_parallel = args.integer("data-parallel", 0) != 0};
  if (lora) {
    options.lora = ft::LoRAConfig{.rank = args.integer("rank", 1), .alpha = args.number("alpha", 0),
                                  .dropout = args.number("dropout", 0)};
    options.lora->check();
  }
  return close_report(args, *report, ft::bench::run_gpt2_bench(options, *report));
}

int run_llama(int argc, char** argv) {
  ft::cli::Args args("ft-bench llama",
                     "Times whole training steps of a Llama-3.2-1B-shaped model with random weights (16 layers,\n"
                     "C 2048, 32 query and 8 KV heads, MLP 8192, vocabulary 128,256, tied) on random tokens:\n"
                     "bf16 with f32 masters and AdamW, or with --lora 1 LoRA fine-tuning (adapters on all seven\n"
                     "projections, the bf16 base frozen): ms/step, tok/s, MFU, peak device memory.");
  args.flag("batch", "4", "sequences per step (B)");
  args.flag("seq", "2048", "tokens per sequence (T)");
  args.flag("layers", "16", "decoder layers (16 is Llama-3.2-1B)");
  args.flag("shape", "1b", "1b: Llama-3.2-1B's widths; 8b: Llama-3.1-8B's (C 4096, MLP 14,336, untied head), with\n"
                           "--layers of them (a one-GPU look at the 8B model's layers)");
  add_step_flags(args, "10", "3", "both", "0");
  args.flag("lora", "0", "1: LoRA fine-tuning steps (lora-llama-1b) instead of full training (llama-1b)");
  args.flag("recompute", "none", "none, block or selective: the layers' activations recomputed in backward (ft-gpt2's\n"
                                 "--recompute)");
  args.flag("rank", "16", "with --lora 1: the adapters' rank r");
  args.flag("alpha", "32", "with --lora 1: LoRA's alpha (the update is alpha/r * B*A)");
  std::optional<ft::bench::BenchReport> report = parse_and_open(args, argc, argv);
  if (!report) return 0;
  const StepFlags step = read_step_flags(args);
  ft::bench::Gpt2BenchOptions options{.family = "llama", .batch = args.integer("batch", 1),
                                      .seq = args.integer("seq", 1), .layers = args.integer("layers", 1),
                                      .warmup = step.warmup, .steps = step.steps, .kernels = step.kernels,
                                      .graph = step.graph, .recompute = args.str("recompute"),
                                      .shape = args.str("shape")};
  if (args.integer("lora", 0) != 0) {
    options.lora = ft::LoRAConfig{.rank = args.integer("rank", 1), .alpha = args.number("alpha", 0)};
    options.lora->check();
  }
  return close_report(args, *report, ft::bench::run_gpt2_bench(options, *report));
}

int run_dlrm(int argc, char** argv) {
  ft::cli::Args args("ft-bench dlrm",
                     "Times whole DLRM training steps (bf16 MLPs with AdamW, f32 tables with sparse SGD inside\n"
                     "backward, dot interaction, BCE) on a fixed random batch in both kernel modes, then the\n"
                     "embedding bag's and the interaction's kernels alone.");
  args.flag("preset", "bench", "bench (dlrm-kaggle: 26 x 100k x 64, batch 8192) or mlperf (26 x 1M x 128, batch 65536)");
  args.flag("batch", "0", "samples per step (0: the preset's)");
  add_step_flags(args, "30", "5", "both", "1");
  args.flag("ops", "1", "1: also time the embedding bag and the interaction alone");
  std::optional<ft::bench::BenchReport> report = parse_and_open(args, argc, argv);
  if (!report) return 0;
  const StepFlags step = read_step_flags(args);
  return close_report(args, *report,
                      ft::bench::run_dlrm_bench({.preset = args.str("preset"), .batch = args.integer("batch", 0),
                                                 .warmup = step.warmup, .steps = step.steps, .kernels = step.kernels,
                                                 .graph = step.graph, .ops = args.integer("ops", 0) != 0},
                                                *report));
}

int run_mlp(int argc, char** argv) {
  ft::cli::Args args("ft-bench mlp",
                     "Times whole mlp-fmnist training steps (784 -> 1024 x3 -> 10, LayerNorm + GELU + Dropout 0.1\n"
                     "after each hidden Linear, cross-entropy, AdamW, bf16) on a fixed random batch in both kernel\n"
                     "modes: what ft-mlp's step costs without its data loading.");
  args.flag("batch", "4096", "samples per step (docs/workloads.md's mlp-fmnist uses 4096)");
  add_step_flags(args, "30", "5", "both", "1", " (ft-mlp's default)");
  std::optional<ft::bench::BenchReport> report = parse_and_open(args, argc, argv);
  if (!report) return 0;
  const StepFlags step = read_step_flags(args);
  return close_report(args, *report,
                      ft::bench::run_mlp_bench({.batch = args.integer("batch", 1), .warmup = step.warmup,
                                                .steps = step.steps, .kernels = step.kernels, .graph = step.graph},
                                               *report));
}

int run(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::printf("usage: ft-bench SUBCOMMAND [flags]\n\nsubcommands:\n"
                "  ops    memory-bound fused ops, forward+backward, fused vs unfused (ft-bench ops --help)\n"
                "  adamw  one AdamW step over gpt2-124M's parameters (ft-bench adamw --help)\n"
                "  gpt2   whole gpt2-124M training steps, fused vs unfused (ft-bench gpt2 --help)\n"
                "  lora   whole LoRA fine-tuning steps of gpt2-124M, r 16 (ft-bench lora --help)\n"
                "  llama  whole Llama-3.2-1B-shaped steps, full or LoRA, fused vs unfused (ft-bench llama --help)\n"
                "  mlp    whole mlp-fmnist training steps, fused vs unfused (ft-bench mlp --help)\n"
                "  dlrm   whole DLRM training steps and the embedding bag's kernels (ft-bench dlrm --help)\n"
                "every subcommand takes --peers FILE,... (PyTorch's results beside ours) and --json FILE\n");
    return argc < 2 ? 1 : 0;
  }
  const std::string sub = argv[1];
  if (sub == "adamw") return run_adamw(argc, argv);
  if (sub == "gpt2") return run_gpt2(argc, argv, false);
  if (sub == "lora") return run_gpt2(argc, argv, true);
  if (sub == "llama") return run_llama(argc, argv);
  if (sub == "dlrm") return run_dlrm(argc, argv);
  if (sub == "mlp") return run_mlp(argc, argv);
  FT_CHECK(sub == "ops", "ft-bench: unknown subcommand '", sub, "' (see --help)");
  return run_ops(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
