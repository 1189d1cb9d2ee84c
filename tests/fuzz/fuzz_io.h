#pragma once
// Fuzz inputs reach the readers as real files (the readers take paths): one memfd per process,
// rewritten for each input, opened through /proc/self/fd.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace zm::fuzz {

inline std::string as_file(const uint8_t* data, size_t size, int slot = 0) {
  static int fds[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  int& fd = fds[slot];
  if (fd < 0) fd = memfd_create("zmfuzz", 0);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) abort();
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace zm::fuzz
