// ft-bench dlrm: whole DLRM training steps (docs/workloads.md's dlrm-kaggle and dlrm-mlperf) in both
// kernel modes, and the embedding bag's and the interaction's kernels alone with their bandwidth.
#pragma once
#include <cstdint>
#include <string>

#include "bench/ft-bench/report.h"

namespace ft::bench {

struct DlrmBenchOptions {
  std::string preset = "bench";  // bench (dlrm-kaggle) or mlperf (dlrm-mlperf)
  int64_t batch = 0;             // 0: the preset's
  int warmup = 5;
  int steps = 30;
  std::string kernels = "both";  // fused, unfused or both
  bool graph = true;
  bool ops = true;  // also time the ops alone
};

/// Adds the fused and unfused steps as dlrm-kaggle or dlrm-mlperf (with " B<batch> rows<rows>"
/// when --batch is not the preset's), as bench/peers/dlrm_torch.py names them.
int run_dlrm_bench(const DlrmBenchOptions& options, BenchReport& report);
/// The embedding bag's and the interaction's kernels alone at the preset's shapes, fused and twin
/// (also printed by ft-bench ops).
void dlrm_ops_table(const DlrmBenchOptions& options);

}  // namespace ft::bench
