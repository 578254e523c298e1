// ft-bench ops: the memory-bound fused ops against their twins on GPT-2 shapes.
#pragma once
#include <cstdint>
#include <string>

#include "bench/ft-bench/report.h"

namespace ft::bench {

struct OpsBenchOptions {
  int64_t rows = 16384;
  int64_t channels = 768;
  int64_t vocab = 50304;
  int warmup = 3;
  int iterations = 20;
  int batched = 10;  // fused ops also timed as this many calls in one graph (1: not)
  std::string only;  // empty: every op and the linear table
};

/// Adds each op's fused and unfused (twin) graph-replay medians to `report`, attention's too.
int run_ops_bench(const OpsBenchOptions& options, BenchReport& report);

}  // namespace ft::bench
