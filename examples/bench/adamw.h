// ft-bench adamw: one optimizer step over the 148 fp32 parameter tensors of gpt2-124M.
#pragma once

namespace ft::bench {

struct AdamWBenchOptions {
  int warmup = 5;
  int iterations = 50;
};

int run_adamw_bench(const AdamWBenchOptions& options);

}  // namespace ft::bench
