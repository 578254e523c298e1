// ft-bench's results beside PyTorch's. Every subcommand adds what it timed (workload, variant
// "fused" or "unfused", median ms) to one BenchReport. `--peers FILE,...` reads the PyTorch
// peers' JSON (bench/peers/results.py writes it), and the report prints each workload's fused,
// unfused and PyTorch times in one row with the ratios; `--json PATH` writes ft-bench's own
// results in the same format, which scripts/plot.py draws. Host code only: it builds and is tested
// without CUDA.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace ft::bench {

struct BenchResult {
  std::string workload;  // docs/workloads.md's name at its own shapes ("gpt2-124M"), else one with the shapes
  std::string variant;   // "fused", "unfused", or a peer's ("torch eager naive foreach")
  double ms = 0;         // median, positive
  std::vector<std::pair<std::string, double>> extras;  // finite numbers: "graph", "peak_gb", "tok_per_s"...
};

/// {"device": GPU name, "date": UTC YYYY-MM-DD, "results": [BenchResult, ...]}.
struct BenchDocument {
  std::string device;
  std::string date;
  std::vector<BenchResult> results;
};

/// Reads a results document; `context` (the file's name) opens every error. A result without a
/// workload or variant name, an ms that is not a positive number, or an extra that is not a finite
/// number is an ft::Error naming the result's index.
BenchDocument parse_bench_document(const std::string& text, const std::string& context);

/// The document as JSON that parse_bench_document (and scripts/plot.py) reads back.
std::string format_bench_document(const BenchDocument& document);

/// Today's date in UTC as YYYY-MM-DD, as the peers date their files.
std::string utc_date_today();

class BenchReport {
 public:
  BenchReport(std::string device, std::string date);

  /// One of ft-bench's results. A zero or negative ms (a variant that could not run or capture)
  /// is left out rather than reported.
  void add(std::string workload, std::string variant, double ms,
           std::vector<std::pair<std::string, double>> extras = {});

  /// Reads a peer's results file. Its device must be this report's: times taken on two GPUs are
  /// not put side by side.
  void add_peers(const std::string& path);

  /// One row a workload this report measured: fused ms, unfused ms, unfused/fused, then the
  /// peers' variants of the same workload, one a row, with unfused/PyTorch and PyTorch/fused.
  /// Empty when nothing was measured.
  std::string side_by_side() const;

  /// ft-bench's own results (not the peers'), through a temporary file and a rename.
  void write_json(const std::string& path) const;

  const BenchDocument& ours() const { return ours_; }

 private:
  BenchDocument ours_;
  std::vector<BenchResult> peers_;
};

}  // namespace ft::bench
