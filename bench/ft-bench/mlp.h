// ft-bench mlp: whole mlp-fmnist training steps (docs/workloads.md) in both kernel modes, on one
// fixed random batch: ft-mlp's model, loss and optimizer without its data loading.
#pragma once
#include <cstdint>
#include <string>

#include "bench/ft-bench/report.h"

namespace ft::bench {

struct MlpBenchOptions {
  int64_t batch = 4096;
  int warmup = 5;
  int steps = 30;
  std::string kernels = "both";  // fused, unfused or both
  bool graph = true;             // replay the step from a CUDA graph, as ft-mlp does by default
};

/// Adds the fused and unfused steps as mlp-fmnist (or "mlp-fmnist B<batch>" at another batch).
int run_mlp_bench(const MlpBenchOptions& options, BenchReport& report);

}  // namespace ft::bench
