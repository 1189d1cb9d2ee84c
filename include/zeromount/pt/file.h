#pragma once
// A read-only file descriptor. Opened O_RDONLY always: the source tree is never written.
#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace zm::pt {

// The modification time in nanoseconds: the part of a file's identity that a rewrite changes.
inline int64_t mtime_ns(const struct stat& s) {
  return int64_t(s.st_mtim.tv_sec) * 1000000000 + s.st_mtim.tv_nsec;
}

class File {
 public:
  File() = default;
  explicit File(const std::string& path);
  File(File&& o) noexcept;
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const struct stat& stat() const { return st_; }
  uint64_t size() const { return uint64_t(st_.st_size); }
  // Reads exactly n bytes or throws an error naming the file, the offset and `what`.
  void read_exact(uint64_t offset, void* buf, size_t n, const char* what) const;
  std::string read_string(uint64_t offset, size_t n, const char* what) const;

 private:
  int fd_ = -1;
  std::string path_;
  struct stat st_ {};
};

}  // namespace zm::pt
