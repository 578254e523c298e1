// ft-bench ops: the memory-bound fused ops against their twins on GPT-2 shapes.
#pragma once
#include <cstdint>
#include <string>

namespace ft::bench {

struct OpsBenchOptions {
  int64_t rows = 16384;
  int64_t channels = 768;
  int64_t vocab = 50304;
  int warmup = 3;
  int iterations = 20;
  std::string only;  // empty: every op and the linear table
};

int run_ops_bench(const OpsBenchOptions& options);

}  // namespace ft::bench
