// The metrics line a person reads and the JSONL file a script reads, with the same fields.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace ft {

struct StepMetrics {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  std::optional<double> grad_norm = {};
  double ms = 0;                      // milliseconds per step (median over the logged window)
  double items_per_s = 0;             // samples/s or tokens/s
  std::optional<double> mfu = {};     // fraction of the datasheet peak, when FLOPs are known
  int64_t skipped_steps = 0;          // steps skipped for non-finite gradients
};

class MetricsLog {
 public:
  /// unit names the throughput ("samples" or "tok"); jsonl_path empty writes no file.
  MetricsLog(std::string unit, const std::string& jsonl_path);
  /// Prints one line and appends one JSON object.
  void log(const StepMetrics& m);
  /// One line describing the step, e.g. "step   12/147 | loss 0.5123 | lr 1.00e-03 | ...".
  std::string format(const StepMetrics& m) const;
  /// A JSON object with the same fields.
  std::string json(const StepMetrics& m) const;

 private:
  std::string unit_;
  std::ofstream file_;
};

}  // namespace ft
