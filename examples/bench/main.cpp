// ft-bench: measurements on the GPU, printed as tables. Subcommands:
//   ft-bench ops    the memory-bound fused ops (fwd+bwd) in both kernel modes
//   ft-bench adamw  one optimizer step over gpt2-124M's parameters (f32, and bf16 with masters), fused vs twin
//   ft-bench gpt2   whole gpt2-124M training steps in both kernel modes
//   ft-bench lora   the same steps as LoRA fine-tuning (lora-gpt2)
//   ft-bench dlrm   whole DLRM training steps (dlrm-kaggle, dlrm-mlperf) and the embedding bag's kernels
#include <cstdio>
#include <cstring>
#include <iostream>

#include "examples/bench/adamw.h"
#include "examples/bench/dlrm.h"
#include "examples/bench/gpt2.h"
#include "examples/bench/ops.h"
#include "examples/common/cli.h"
#include "lib/runtime.h"

namespace {

int run_ops(int argc, char** argv) {
  ft::cli::Args args("ft-bench ops", "Times each memory-bound fused op (forward + backward) on GPT-2 shapes in both\n"
                                     "kernel modes, and prints bandwidth against the 3.0 TB/s ceiling.");
  args.flag("rows", "16384", "rows N (B·T)");
  args.flag("channels", "768", "channels C");
  args.flag("vocab", "50304", "vocabulary V for cross-entropy");
  args.flag("iterations", "20", "timed iterations (median reported)");
  args.flag("warmup", "3", "untimed iterations first");
  args.flag("only", "", "run only the ops whose name contains this text (for a profiler run); 'linear', 'attention',\n"
                        "'lora' or 'dlrm' (the embedding bag and interaction at dlrm-kaggle shapes) for that table alone");
  if (!args.parse(argc - 1, argv + 1)) return 0;
  FT_CHECK(ft::cuda_available(), "ft-bench: needs a CUDA GPU");
  ft::bench::OpsBenchOptions o;
  o.only = args.str("only");
  o.rows = args.integer("rows", 1);
  o.channels = args.integer("channels", 1);
  o.vocab = args.integer("vocab", 0);
  o.iterations = static_cast<int>(args.integer("iterations", 1));
  o.warmup = static_cast<int>(args.integer("warmup", 0));
  return ft::bench::run_ops_bench(o);
}

int run_adamw(int argc, char** argv) {
  ft::cli::Args args("ft-bench adamw", "Times one AdamW step over the 148 parameter tensors of gpt2-124M (124.5M parameters,\n"
                                       "f32 gradients): fused multi-tensor on f32 parameters, the same with norm + clipping,\n"
                                       "on bf16 parameters with f32 masters as in the gpt2 step, and the per-tensor twin.");
  args.flag("iterations", "50", "timed iterations (median reported)");
  args.flag("warmup", "5", "untimed iterations first");
  if (!args.parse(argc - 1, argv + 1)) return 0;
  FT_CHECK(ft::cuda_available(), "ft-bench: needs a CUDA GPU");
  return ft::bench::run_adamw_bench({.warmup = static_cast<int>(args.integer("warmup", 0)),
                                     .iterations = static_cast<int>(args.integer("iterations", 1))});
}

// ft-bench gpt2 and ft-bench lora share their flags; lora adds the adapters' and defaults to the
// lora-gpt2 workload (r = 16 on all four linears of every block, the base frozen).
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
  args.flag("steps", "10", "timed steps (median reported)");
  args.flag("warmup", "3", "untimed steps first");
  args.flag("kernels", lora ? "fused" : "both", "fused, unfused or both");
  args.flag("graph", lora ? "1" : "0", "1: replay each step from a CUDA graph captured after the warm-up");
  args.flag("data-parallel", "0", "1: also time the step data-parallel at world size 1 on NCCL (gradient buckets\n"
                                  "averaged during backward), plain and ZeRO-1, against the step without");
  if (lora) {
    args.flag("rank", "16", "the adapters' rank r");
    args.flag("alpha", "32", "LoRA's alpha (the update is alpha/r * B*A)");
    args.flag("dropout", "0", "dropout on the adapters' input");
  }
  if (!args.parse(argc - 1, argv + 1)) return 0;
  FT_CHECK(ft::cuda_available(), "ft-bench: needs a CUDA GPU");
  const std::string kernels = args.str("kernels");
  FT_CHECK(kernels == "fused" || kernels == "unfused" || kernels == "both",
           "ft-bench: --kernels must be fused, unfused or both");
  ft::bench::Gpt2BenchOptions options{.batch = args.integer("batch", 1), .seq = args.integer("seq", 1),
                                      .layers = args.integer("layers", 1),
                                      .warmup = static_cast<int>(args.integer("warmup", 0)),
                                      .steps = static_cast<int>(args.integer("steps", 0)), .kernels = kernels,
                                      .graph = args.integer("graph", 0) != 0,
                                      .data_parallel = args.integer("data-parallel", 0) != 0};
  if (lora) {
    options.lora = ft::LoRAConfig{.rank = args.integer("rank", 1), .alpha = args.number("alpha", 0),
                                  .dropout = args.number("dropout", 0)};
    options.lora->check();
  }
  return ft::bench::run_gpt2_bench(options);
}

int run_dlrm(int argc, char** argv) {
  ft::cli::Args args("ft-bench dlrm",
                     "Times whole DLRM training steps (bf16 MLPs with AdamW, f32 tables with sparse SGD inside\n"
                     "backward, dot interaction, BCE) on a fixed random batch in both kernel modes, then the\n"
                     "embedding bag's and the interaction's kernels alone.");
  args.flag("preset", "bench", "bench (dlrm-kaggle: 26 x 100k x 64, batch 8192) or mlperf (26 x 1M x 128, batch 65536)");
  args.flag("batch", "0", "samples per step (0: the preset's)");
  args.flag("steps", "30", "timed steps (median reported)");
  args.flag("warmup", "5", "untimed steps first");
  args.flag("kernels", "both", "fused, unfused or both");
  args.flag("graph", "1", "1: replay each step from a CUDA graph captured after the warm-up");
  args.flag("ops", "1", "1: also time the embedding bag and the interaction alone");
  if (!args.parse(argc - 1, argv + 1)) return 0;
  FT_CHECK(ft::cuda_available(), "ft-bench: needs a CUDA GPU");
  const std::string kernels = args.str("kernels");
  FT_CHECK(kernels == "fused" || kernels == "unfused" || kernels == "both",
           "ft-bench: --kernels must be fused, unfused or both");
  return ft::bench::run_dlrm_bench({.preset = args.str("preset"), .batch = args.integer("batch", 1),
                                    .warmup = static_cast<int>(args.integer("warmup", 0)),
                                    .steps = static_cast<int>(args.integer("steps", 0)), .kernels = kernels,
                                    .graph = args.integer("graph", 0) != 0, .ops = args.integer("ops", 0) != 0});
}

int run(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::printf("usage: ft-bench SUBCOMMAND [flags]\n\nsubcommands:\n"
                "  ops    memory-bound fused ops, forward+backward, fused vs unfused (ft-bench ops --help)\n"
                "  adamw  one AdamW step over gpt2-124M's parameters (ft-bench adamw --help)\n"
                "  gpt2   whole gpt2-124M training steps, fused vs unfused (ft-bench gpt2 --help)\n"
                "  lora   whole LoRA fine-tuning steps of gpt2-124M, r 16 (ft-bench lora --help)\n"
                "  dlrm   whole DLRM training steps and the embedding bag's kernels (ft-bench dlrm --help)\n");
    return argc < 2 ? 1 : 0;
  }
  const std::string sub = argv[1];
  if (sub == "adamw") return run_adamw(argc, argv);
  if (sub == "gpt2") return run_gpt2(argc, argv, false);
  if (sub == "lora") return run_gpt2(argc, argv, true);
  if (sub == "dlrm") return run_dlrm(argc, argv);
  FT_CHECK(sub == "ops", "ft-bench: unknown subcommand '", sub, "' (see --help)");
  return run_ops(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
