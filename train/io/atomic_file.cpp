#include "train/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "lib/error.h"

namespace ft {

AtomicFile::AtomicFile(std::string path, std::string op)
    : path_(std::move(path)), temp_(path_ + ".tmp." + std::to_string(::getpid())), op_(std::move(op)) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FT_CHECK(fd_ >= 0, op_, ": cannot create '", temp_, "': ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    FT_CHECK(n > 0, op_, ": writing '", temp_, "' failed: ", std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  FT_CHECK(::fsync(fd_) == 0, op_, ": fsync of '", temp_, "' failed: ", std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    FT_FAIL(op_, ": cannot rename '", temp_, "' to '", path_, "': ", std::strerror(err));
  }
  // Make the rename itself durable.
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& op) {
  AtomicFile file(path, op);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace ft
