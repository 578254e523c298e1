// Autotuned cuBLASLt choices kept in a text file (PyTorch TunableOp's idea): a process that finds
// a product configuration there runs the algorithm recorded for it instead of timing the
// candidates again, so every process that shares the file picks the same algorithms and gets
// bit-identical results. lib/ops/matmul/matmul.cu reads and writes it when autotuning is on and a file
// is named (lib/ops/matmul/matmul.h).
//
// Format: the first line is "fusedtrain gemm tuning v1 <validator>", the validator naming the
// device and the cuBLASLt version the choices were timed on; each further line is a
// configuration's key (no spaces) and the chosen candidate's index in cuBLASLt's heuristic
// order. A file written for another validator is ignored (and replaced at the next record).
#pragma once
#include <map>
#include <optional>
#include <string>

namespace ft {

class GemmTuningFile {
 public:
  /// Loads `path` if it exists and names `validator`; a file that does not parse is an
  /// ft::Error naming the path and line.
  GemmTuningFile(std::string path, std::string validator);
  const std::string& path() const { return path_; }
  /// The candidate recorded for `key` (no whitespace), if any.
  std::optional<int> find(const std::string& key) const;
  /// Records key → candidate (>= 0) and rewrites the file whole: a temporary file renamed over
  /// it, so a crash leaves the old file or the new one, never half of one. Writers take turns
  /// (a lock file beside it, `path.lock`) and each merges what the others recorded meanwhile.
  void record(const std::string& key, int candidate);
  size_t size() const { return choices_.size(); }

 private:
  std::string path_, validator_;
  std::map<std::string, int> choices_;
};

/// False when `path` exists but is not a tuning file (a bad header or line), whatever its
/// validator: the example binaries set such a cache aside instead of failing on it.
bool gemm_tuning_file_parses(const std::string& path);

/// The cache file's name for a GPU model (device_name()): "gemm-tuning-NVIDIA_H100_80GB_HBM3.txt",
/// one file a model, so machines of several models sharing a home folder keep a file each;
/// "gemm-tuning.txt" for an empty name.
std::string gemm_tuning_file_name(const std::string& device);

/// Where the example binaries keep tuned choices unless told otherwise (their --gemm-tuning auto):
/// $XDG_CACHE_HOME/fusedtrain/, else ~/.cache/fusedtrain/, and gemm_tuning_file_name of the
/// current GPU; empty when neither variable is set.
std::string default_gemm_tuning_path();

}  // namespace ft
