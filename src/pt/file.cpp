#include "zeromount/pt/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "zeromount/pt/error.h"

namespace zm::pt {

File::File(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(where(path, std::string("cannot open: ") + strerror(errno)), errno);
  if (::fstat(fd_, &st_) != 0) throw Error(where(path, "cannot stat"), errno);
  if (!S_ISREG(st_.st_mode)) throw FormatError(where(path, "not a regular file"));
}

File::File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), st_(o.st_) {
  o.fd_ = -1;
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    st_ = o.st_;
    o.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::read_exact(uint64_t offset, void* buf, size_t n, const char* what) const {
  if (offset > size() || n > size() - offset)
    throw FormatError(where(path_,
                            std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, file has " +
                                std::to_string(size()),
                            (long long)offset));
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, n, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(where(path_, std::string("read failed: ") + strerror(errno), (long long)offset), errno);
    if (r == 0)
      throw FormatError(where(path_, std::string("unexpected end of file reading ") + what, (long long)offset));
    p += r;
    n -= size_t(r);
    offset += uint64_t(r);
  }
}

std::string File::read_string(uint64_t offset, size_t n, const char* what) const {
  std::string s(n, '\0');
  read_exact(offset, s.data(), n, what);
  return s;
}

}  // namespace zm::pt
