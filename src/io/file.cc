// Whole-file reads and crash-safe writes through a temporary file and rename.
// Exercised by tests/io/file_test.cc and by every writer of the project.
#include "io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gproj/error.h"

namespace gproj {

namespace {

[[noreturn]] void fail_io(const std::string& what, const std::string& action, int err) {
  throw Error(ErrorCode::kIO, what + ": " + action + ": " + std::strerror(err));
}

// Owns a file descriptor; close() reports the error that the destructor has to swallow.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

void write_all(int fd, const void* data, size_t size, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_io(what, "write failed", errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// Makes the rename durable. Some file systems cannot sync a directory (EINVAL); the rename stands there.
void sync_directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail_io(dir, "cannot open directory to sync the rename of " + path, errno);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail_io(dir, "fsync of directory failed", errno);
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail_io(path, "cannot open for reading", errno);
  std::vector<uint8_t> data;
  struct stat st;
  if (::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode)) data.reserve(static_cast<size_t>(st.st_size));
  uint8_t buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_io(path, "read failed", errno);
    }
    if (n == 0) return data;
    data.insert(data.end(), buffer, buffer + n);
  }
}

void write_file_atomic(const std::string& path, const std::vector<FilePiece>& pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail_io(tmp, "cannot create", errno);
    for (const FilePiece& p : pieces) write_all(fd.get(), p.data, p.size, tmp);
    if (::fsync(fd.get()) != 0) fail_io(tmp, "fsync failed", errno);
    if (fd.close() != 0) fail_io(tmp, "close failed", errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail_io(path, "cannot rename " + tmp + " over it", errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  sync_directory_of(path);
}

void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, {{text.data(), text.size()}});
}

void check_writable(const std::string& path) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail_io(path, "cannot be written (creating " + tmp + ")", errno);
  fd.close();
  ::unlink(tmp.c_str());
}

}  // namespace gproj
