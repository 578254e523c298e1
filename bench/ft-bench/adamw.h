// ft-bench adamw: one optimizer step over the 148 parameter tensors of gpt2-124M (f32, and bf16
// with f32 masters as in the gpt2 step), f32 gradients.
#pragma once
#include "bench/ft-bench/report.h"

namespace ft::bench {

struct AdamWBenchOptions {
  int warmup = 5;
  int iterations = 50;
};

/// Adds "adamw-gpt2": the fused multi-tensor step (f32, no clipping) and the per-tensor twin,
/// graph-replay medians.
int run_adamw_bench(const AdamWBenchOptions& options, BenchReport& report);

}  // namespace ft::bench
