// ft-bench adamw: one optimizer step over the 148 parameter tensors of gpt2-124M (f32, and bf16
// with f32 masters as in the gpt2 step), f32 gradients.
#pragma once

namespace ft::bench {

struct AdamWBenchOptions {
  int warmup = 5;
  int iterations = 50;
};

int run_adamw_bench(const AdamWBenchOptions& options);

}  // namespace ft::bench
