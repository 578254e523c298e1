// A folder under the system temp dir for one test's files, removed when the test ends. The
// process id and a counter keep parallel ctest processes and repeated uses apart.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace ft::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ft_test")
      : path_(std::filesystem::temp_directory_path() /
              (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace ft::test
