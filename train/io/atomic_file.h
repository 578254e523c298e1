// Files replaced atomically: written under a temporary name in the same folder, flushed to disk
// and renamed over the target, so a crash leaves either the old file or the new one, never a
// torn one.
#pragma once
#include <cstddef>
#include <string>

namespace ft {

class AtomicFile {
 public:
  /// Creates the temporary file `path + ".tmp." + pid`. `op` starts every error message
  /// ("save_safetensors: cannot create ...").
  AtomicFile(std::string path, std::string op);
  /// Closes and removes the temporary file unless commit() ran, leaving `path` untouched.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  /// Flushes the temporary file to disk, renames it over `path` and makes the rename durable.
  void commit();

 private:
  std::string path_, temp_, op_;
  int fd_ = -1;
};

/// Writes `text` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& op);

}  // namespace ft
