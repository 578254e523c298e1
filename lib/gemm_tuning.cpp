#include "lib/gemm_tuning.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "lib/error.h"
#include "lib/runtime.h"

namespace ft {

namespace {

constexpr const char* kHeader = "fusedtrain gemm tuning v1 ";

/// Reads `path`'s choices into `choices` when the file exists and names `validator`. A line that
/// is not a key and an index: an ft::Error naming it when `strict`, else the file counts as empty.
/// Returns false for such a file.
bool read_choices(const std::string& path, const std::string& validator, bool strict,
                  std::map<std::string, int>& choices) {
  std::ifstream in(path);
  if (!in) return true;  // none yet: the first record writes it
  std::string line;
  if (!std::getline(in, line) || line != kHeader + validator) return true;  // timed elsewhere: start over
  std::map<std::string, int> read;
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string key, rest;
    int candidate = -1;
    const bool parsed = fields >> key >> candidate && candidate >= 0 && !(fields >> rest);
    FT_CHECK(parsed || !strict, "gemm tuning file '", path, "': line ", number,
             " is not a key and a candidate index: '", line, "'");
    if (!parsed) return false;
    read[key] = candidate;
  }
  choices.insert(read.begin(), read.end());  // keeps the entries already there
  return true;
}

/// Holds an exclusive lock on `path` (created if missing) for its lifetime; processes that write
/// the same tuning file take turns.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    FT_CHECK(fd_ >= 0, "gemm tuning file: cannot open the lock file '", path, "'");
    int status;
    while ((status = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (status != 0) ::close(fd_);
    FT_CHECK(status == 0, "gemm tuning file: cannot lock '", path, "': ", std::strerror(errno));
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

GemmTuningFile::GemmTuningFile(std::string path, std::string validator)
    : path_(std::move(path)), validator_(std::move(validator)) {
  FT_CHECK(!path_.empty(), "gemm tuning file: empty path");
  read_choices(path_, validator_, /*strict=*/true, choices_);
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
  // Processes sharing the file (a data-parallel run's ranks, two runs at once) take turns, and
  // each keeps what the others recorded since it read the file: this process's own choices win
  // for the keys it has used, the rest come from the file as it is now.
  const FileLock lock(path_ + ".lock");
  read_choices(path_, validator_, /*strict=*/false, choices_);
  std::string temp = path_ + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  FT_CHECK(fd >= 0, "gemm tuning file: cannot create a temporary beside '", path_, "'");
  ::close(fd);
  {
    std::ofstream out(temp, std::ios::trunc);
    out << kHeader << validator_ << '\n';
    for (const auto& [k, c] : choices_) out << k << ' ' << c << '\n';
    out.flush();
    if (!out) std::remove(temp.c_str());
    FT_CHECK(static_cast<bool>(out), "gemm tuning file: writing '", temp, "' failed");
  }
  std::error_code ec;
  std::filesystem::rename(temp, path_, ec);
  if (ec) std::remove(temp.c_str());
  FT_CHECK(!ec, "gemm tuning file: cannot rename '", temp, "' to '", path_, "': ", ec.message());
}

bool gemm_tuning_file_parses(const std::string& path) {
  std::ifstream in(path);
  if (!in) return true;
  std::string header;
  if (!std::getline(in, header) || header.rfind(kHeader, 0) != 0) return false;
  std::map<std::string, int> unused;
  return read_choices(path, header.substr(std::string(kHeader).size()), /*strict=*/false, unused);
}

std::string gemm_tuning_file_name(const std::string& device) {
  if (device.empty()) return "gemm-tuning.txt";
  std::string model = device;
  for (char& c : model)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return "gemm-tuning-" + model + ".txt";
}

std::string default_gemm_tuning_path() {
  const std::string name = gemm_tuning_file_name(device_name());
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    return std::string(cache) + "/fusedtrain/" + name;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/fusedtrain/" + name;
  return "";
}

}  // namespace ft
