#include "lib/gemm_tuning.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "lib/error.h"

namespace ft {

namespace {
constexpr const char* kHeader = "fusedtrain gemm tuning v1 ";
}  // namespace

GemmTuningFile::GemmTuningFile(std::string path, std::string validator)
    : path_(std::move(path)), validator_(std::move(validator)) {
  FT_CHECK(!path_.empty(), "gemm tuning file: empty path");
  std::ifstream in(path_);
  if (!in) return;  // none yet: the first record writes it
  std::string line;
  if (!std::getline(in, line) || line != kHeader + validator_) return;  // timed elsewhere: start over
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string key, rest;
    int candidate = -1;
    FT_CHECK(fields >> key >> candidate && candidate >= 0 && !(fields >> rest), "gemm tuning file '", path_,
             "': line ", number, " is not a key and a candidate index: '", line, "'");
    choices_[key] = candidate;
  }
}

std::optional<int> GemmTuningFile::find(const std::string& key) const {
  const auto it = choices_.find(key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

void GemmTuningFile::record(const std::string& key, int candidate) {
  FT_CHECK(candidate >= 0 && !key.empty() && key.find_first_of(" \t\n") == std::string::npos,
           "gemm tuning file: bad record '", key, "' -> ", candidate);
  choices_[key] = candidate;
  // A temporary of this process's own: the ranks of a data-parallel run share one file.
  const std::string temp = path_ + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    FT_CHECK(static_cast<bool>(out), "gemm tuning file: cannot write '", temp, "'");
    out << kHeader << validator_ << '\n';
    for (const auto& [k, c] : choices_) out << k << ' ' << c << '\n';
    out.flush();
    FT_CHECK(static_cast<bool>(out), "gemm tuning file: writing '", temp, "' failed");
  }
  std::error_code ec;
  std::filesystem::rename(temp, path_, ec);
  FT_CHECK(!ec, "gemm tuning file: cannot rename '", temp, "' to '", path_, "': ", ec.message());
}

std::string default_gemm_tuning_path() {
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    return std::string(cache) + "/fusedtrain/gemm-tuning.txt";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/fusedtrain/gemm-tuning.txt";
  return "";
}

}  // namespace ft
