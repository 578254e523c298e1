// ft-bench gpt2: whole training steps of gpt2-124M (docs/workloads.md) in both kernel modes; with
// `lora`, LoRA fine-tuning steps (ft-bench lora, the lora-gpt2 workload). ft-bench llama: the same
// steps of a Llama-3.2-1B-shaped model (llama-1b, and lora-llama-1b with adapters on all seven
// projections).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "bench/ft-bench/report.h"
#include "layers/lora.h"

namespace ft::bench {

struct Gpt2BenchOptions {
  std::string family = "gpt2";  // or "llama": LlamaConfig::llama_3_2_1b() with `layers` layers
  int64_t batch = 16;
  int64_t seq = 1024;
  int64_t layers = 12;  // fewer for a quick look; the workload is 12
  int warmup = 3;
  int steps = 10;
  std::string kernels = "both";  // fused, unfused or both
  bool graph = false;            // replay the step from a CUDA graph
  std::optional<LoRAConfig> lora;  // LoRA fine-tuning steps (all the family's targets, the base frozen)
  /// Also time the step data-parallel at world size 1 on NCCL (buckets averaged during backward),
  /// plain and ZeRO-1, against the same step without data parallelism.
  bool data_parallel = false;
  std::string recompute = "none";  // none, block or selective (lib/ops/recompute/recompute.h)
  /// Llama only: "1b" (Llama-3.2-1B's widths) or "8b" (Llama-3.1-8B's: C 4096, MLP 14,336, untied),
  /// each with `layers` layers.
  std::string shape = "1b";
};

/// Adds each variant that ran ("fused", "unfused", "fused+dp", ...) under the workload's name:
/// gpt2-124M (lora-gpt2) or llama-1b (lora-llama-1b) at docs/workloads.md's shapes, else a name
/// with the shapes in it.
int run_gpt2_bench(const Gpt2BenchOptions& options, BenchReport& report);

}  // namespace ft::bench
