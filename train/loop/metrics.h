// The metrics line a person reads and the JSONL file a script reads, with the same fields.
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>

namespace ft {

struct StepMetrics {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;                      // the mean over loss_steps steps up to this one
  int64_t loss_steps = 1;               // how many: the steps since the last line (Trainer::Options::window_loss)
  double lr = 0;
  std::optional<double> grad_norm = {};
  double ms = 0;                        // wall clock per step over the logged window, data included
  std::optional<double> step_ms = {};   // median of the steps alone (CUDA events on a GPU)
  double items_per_s = 0;               // samples/s or tokens/s, from the wall clock
  std::optional<double> mfu = {};       // fraction of the device's dense peak, when known
  bool mfu_expected = false;            // FLOPs are known but the peak is not: the line shows "MFU ?"
  int64_t skipped_steps = 0;            // steps skipped for non-finite gradients
  int ranks = 1;                        // data-parallel processes; the loss is their mean
  int64_t items_per_step = 0;           // the global batch in items (shown with ranks > 1)
};

class MetricsLog {
 public:
  /// unit names the throughput ("samples" or "tok"); jsonl_path empty writes no file; step_label
  /// names step_ms on the line ("gpu" on a GPU, where it is the kernels' time alone).
  MetricsLog(std::string unit, const std::string& jsonl_path, std::string step_label = "gpu");
  /// Prints one line and appends one JSON object.
  void log(const StepMetrics& m);
  /// One line describing the step, e.g. "step   12/147 | loss 0.5123 | lr 1.00e-03 | ...".
  std::string format(const StepMetrics& m) const;
  /// A JSON object with the same fields.
  std::string json(const StepMetrics& m) const;
  /// Prints "step   20 | val loss 4.1234" (every metric, in name order) and appends
  /// {"step": 20, "eval": {"val loss": 4.1234}}.
  void log_eval(int64_t step, const std::map<std::string, double>& metrics);
  std::string format_eval(int64_t step, const std::map<std::string, double>& metrics) const;

 private:
  void append(const std::string& json_line);

  std::string unit_, step_label_;
  std::ofstream file_;
};

}  // namespace ft
