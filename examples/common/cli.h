// A small command-line parser for the example binaries: --name value flags with defaults and
// help text, so every binary's --help lists every flag.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "lib/error.h"
#include "lib/gemm_tuning.h"
#include "lib/kernel_mode.h"
#include "lib/launch_env.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/parse.h"
#include "lib/runtime.h"

namespace ft::cli {

class Args {
 public:
  Args(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

  /// Declares a flag with its default value (as text) and one line of help.
  void flag(const std::string& name, const std::string& default_value, const std::string& help) {
    order_.push_back(name);
    values_[name] = default_value;
    help_[name] = help;
  }

  /// Parses argv; returns false when --help was asked for (after printing it).
  bool parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        print_help(std::cout);
        return false;
      }
      FT_CHECK(arg.rfind("--", 0) == 0, program_, ": unexpected argument '", arg, "' (see --help)");
      std::string name = arg.substr(2), value;
      const size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else {
        FT_CHECK(i + 1 < argc, program_, ": flag --", name, " needs a value (see --help)");
        value = argv[++i];
      }
      FT_CHECK(values_.count(name), program_, ": unknown flag --", name, " (see --help)");
      values_[name] = value;
      given_.insert(name);
    }
    return true;
  }

  std::string str(const std::string& name) const { return values_.at(name); }
  /// Whether the command line set the flag (to any value, its default too).
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  /// A one-line note (rank 0 only) for each of `flags` the command line set that this setup
  /// ignores, saying `why`: nothing the user asked for is dropped without a word.
  void note_ignored(const std::vector<std::string>& flags, const std::string& why) const {
    if (launch_env().rank != 0) return;
    for (const std::string& flag : flags)
      if (given(flag)) std::printf("%s: note: --%s is ignored: %s\n", program_.c_str(), flag.c_str(), why.c_str());
  }
  /// A switch: exactly 0 or 1 (an ft::Error naming the flag otherwise).
  bool boolean(const std::string& name) const {
    const std::string& v = values_.at(name);
    FT_CHECK(v == "0" || v == "1", program_, ": --", name, " must be 0 or 1, got '", v, "'");
    return v == "1";
  }
  /// The flag as a whole, in-range integer at least `min` (an ft::Error naming the flag otherwise).
  long long integer(const std::string& name, long long min = std::numeric_limits<long long>::min()) const {
    const long long x = parse_int64(values_.at(name), program_ + ": --" + name);
    FT_CHECK(x >= min, program_, ": --", name, " must be at least ", min, ", got ", x);
    return x;
  }
  /// The flag as a finite number at least `min`.
  double number(const std::string& name, double min = -std::numeric_limits<double>::infinity()) const {
    const double x = parse_double(values_.at(name), program_ + ": --" + name);
    FT_CHECK(x >= min, program_, ": --", name, " must be at least ", min, ", got ", x);
    return x;
  }

  void print_help(std::ostream& out) const {
    out << "usage: " << program_ << " [flags]\n\n" << summary_ << "\n\nflags:\n";
    for (const std::string& name : order_) {
      std::string left = "  --" + name + " VALUE";
      if (left.size() < 24) left.resize(24, ' ');
      // A help text of several lines continues under its first line, not at the margin.
      std::string help = help_.at(name);
      for (size_t at = help.find('\n'); at != std::string::npos; at = help.find('\n', at + 1))
        help.insert(at + 1, std::string(left.size() + 1, ' '));
      out << left << " " << help;
      if (!values_.at(name).empty()) out << " (default: " << values_.at(name) << ")";
      out << "\n";
    }
    out << "  --help                 print this help\n";
  }

 private:
  std::string program_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> values_, help_;
  std::set<std::string> given_;
};

/// Declares --gemm-tuning: which cuBLASLt algorithm each product runs (lib/ops/matmul/matmul.h).
inline void add_gemm_tuning_flag(Args& args) {
  args.flag("gemm-tuning", "auto",
            "on CUDA, cuBLASLt's algorithm for each product shape. auto: time its first 8 candidates\n"
            "once and keep the fastest in $FT_GEMM_TUNING_FILE, else in $XDG_CACHE_HOME (or ~/.cache)\n"
            "/fusedtrain/gemm-tuning-<GPU model>.txt, so later runs and --resume pick the same ones\n"
            "untimed;"
            " PATH: the same with that file; off: the heuristic's first choice");
}

/// Applies --gemm-tuning (before the first product). The choices' folder must take new files.
/// With the default cache and no usable folder for it, tuning stays off with a note: choices timed anew in
/// every process would make a resumed run differ from the one it continues in the last bits.
/// A default cache that is not a tuning file (another program's, a hand edit) is set aside as
/// PATH.bad with a note; a named file (the flag's or FT_GEMM_TUNING_FILE) must be one, or it is an
/// error when first read.
inline void apply_gemm_tuning_flag(const Args& args, const std::string& program) {
  std::string path = args.str("gemm-tuning");
  FT_CHECK(!path.empty(), program, ": --gemm-tuning needs auto, off or a file path");
  if (path == "off") {
    set_gemm_autotune(false);
    set_gemm_tuning_file("");
    return;
  }
  const bool automatic = path == "auto";
  bool cache = false;  // the default cache file, neither named by the flag nor by the environment
  if (automatic) {
    const char* named = std::getenv("FT_GEMM_TUNING_FILE");
    cache = !(named && *named);
    path = cache ? default_gemm_tuning_path() : named;
  }
  // Whether the folder exists (or can be made) and takes new files, which is what writing the
  // choices needs (a temporary renamed over the file).
  std::string problem = path.empty() ? "neither XDG_CACHE_HOME nor HOME is set" : "";
  if (problem.empty()) {
    std::filesystem::path folder = std::filesystem::path(path).parent_path();
    if (folder.empty()) folder = ".";
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    std::string probe = (folder / ".ft-write-probe.XXXXXX").string();
    const int fd = error ? -1 : ::mkstemp(probe.data());
    if (fd >= 0) {
      ::close(fd);
      std::remove(probe.c_str());
    } else {
      problem = "cannot create files in '" + folder.string() + "'" + (error ? ": " + error.message() : "");
    }
  }
  if (!problem.empty()) {
    FT_CHECK(cache, program, ": --gemm-tuning '", path, "': ", problem);
    std::fprintf(stderr, "note: no cache folder for the tuned GEMM choices (%s); the heuristic's are used\n",
                 problem.c_str());
    set_gemm_autotune(false);
    set_gemm_tuning_file("");
    return;
  }
  if (cache && !gemm_tuning_file_parses(path)) {
    std::error_code error;
    std::filesystem::rename(path, path + ".bad", error);
    std::fprintf(stderr, "note: '%s' is not a GEMM tuning file; %s, and the choices are timed again\n", path.c_str(),
                 error ? "it is ignored" : "set aside as .bad");
    if (error) path += ".new";  // the unreadable one stays; write beside it
  }
  set_gemm_autotune(true);
  set_gemm_tuning_file(path);
  if (launch_env().rank == 0) std::printf("cuBLASLt algorithms: autotuned, the choices kept in %s\n", path.c_str());
}

/// Declares --device (default: cuda when a GPU is visible) and --kernels.
inline void add_device_flags(Args& args) {
  args.flag("device", cuda_available() ? "cuda" : "cpu", "cpu or cuda");
  args.flag("kernels", "fused", "fused or unfused: fused CUDA kernels or their composite twins");
  args.flag("graph", "1", "1: on CUDA, capture the whole training step as a CUDA graph after two eager steps and\n"
                          "replay it (one launch a step; the grad norm is shown only when clipping takes it);\n"
                          "0: enqueue every kernel of every step from the host");
  add_gemm_tuning_flag(args);
}

/// --graph as a bool.
inline bool graph_flag(const Args& args) { return args.boolean("graph"); }

/// Reads --device (checking a GPU is there when asked for) and applies --kernels globally.
inline Device apply_device_flags(const Args& args, const std::string& program) {
  const Device device = Device::parse(args.str("device"));
  const GpuPinning& pinned = gpu_pinning();
  FT_CHECK(!device.is_cuda() || pinned.problem.empty(), program, ": ", pinned.problem);
  FT_CHECK(!device.is_cuda() || cuda_available(), program, ": --device cuda, but no CUDA GPU is available",
           pinned.pinned ? " (this rank, local rank " + std::to_string(pinned.local_rank) + ", was given CUDA_VISIBLE_DEVICES=" +
                               pinned.visible + ": more processes on this machine than GPUs?)"
                         : std::string());
  // Each rank of a run of several processes names the GPU it got (the library pinned it to its
  // local rank's when it was loaded, lib/launch_env.h), so that a launch is easy to check.
  const LaunchEnv env = launch_env();
  if (device.is_cuda() && env.distributed()) {
    std::printf("rank %d of %d: %s (local rank %d, CUDA_VISIBLE_DEVICES=%s)\n", env.rank, env.world_size,
                device_identity().c_str(), env.local_rank, pinned.visible.empty() ? "unset" : pinned.visible.c_str());
    std::fflush(stdout);
  }
  set_kernel_mode(parse_kernel_mode(args.str("kernels")));
  if (device.is_cuda()) apply_gemm_tuning_flag(args, program);
  return device;
}

/// Runs a binary's body; an ft::Error becomes "error: ..." on stderr and exit status 1, so a
/// user sees the message instead of an uncaught exception.
template <class Body>
int guarded_main(Body&& body) {
  try {
    return body();
  } catch (const ft::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // a library's own exception: still a message, not an abort
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace ft::cli
