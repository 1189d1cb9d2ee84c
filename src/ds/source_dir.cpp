#include "zeromount/ds/source_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace zm::ds {

namespace {

using Clock = std::chrono::steady_clock;
// How long a folder reached through descriptors is trusted to still be at its path: as long as the
// FileTable trusts a shard's path (file_table.cpp).
constexpr auto kTrusted = std::chrono::milliseconds(100);

// The folders opened last, by path: O_PATH descriptors (no read rights needed, no listing
// position), each with when the path it was reached by was last looked up whole.
class DirCache {
 public:
  // A descriptor of `path` and when it was checked, if it is kept and still trusted at `now`.
  Dir take(const std::string& path, Clock::time_point now, Clock::time_point* checked) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_path_.find(path);
    if (it == by_path_.end() || now - it->second->checked >= kTrusted) return Dir();
    lru_.splice(lru_.begin(), lru_, it->second);
    *checked = it->second->checked;
    return Dir(::fcntl(it->second->fd, F_DUPFD_CLOEXEC, 0));
  }
  // Keeps a copy of `fd` for `path` (replacing what was kept for it), dropping the least recent
  // folder beyond kDirsKept.
  void put(const std::string& path, int fd, Clock::time_point checked) {
    const int kept = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (kept < 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    erase(path);
    lru_.push_front(Slot{path, kept, checked});
    by_path_.emplace(lru_.front().path, lru_.begin());
    while (lru_.size() > kDirsKept) erase(lru_.back().path);
  }

 private:
  struct Slot {
    std::string path;
    int fd;
    Clock::time_point checked;
  };
  void erase(const std::string& path) {
    auto it = by_path_.find(path);
    if (it == by_path_.end()) return;
    const auto slot = it->second;
    by_path_.erase(it);
    ::close(slot->fd);
    lru_.erase(slot);
  }

  std::mutex mu_;
  std::list<Slot> lru_;                                                      // most recent first
  std::unordered_map<std::string_view, std::list<Slot>::iterator> by_path_;  // views of Slot::path
};

DirCache& cache() {
  static DirCache c;
  return c;
}

// A folder deleted since it was opened has no links left: its path now names something else or nothing.
bool alive(const Dir& d) {
  struct stat st {};
  return d.stat(st) && st.st_nlink > 0;
}

}  // namespace

Dir& Dir::operator=(Dir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Dir::~Dir() {
  if (fd_ >= 0) {
    const int err = errno;  // callers read errno after a Dir that failed has gone
    ::close(fd_);
    errno = err;
  }
}

std::vector<Dir::Entry> Dir::list(std::error_code& ec) const {
  std::vector<Entry> out;
  ec.clear();
  // Its own open file description: a listing position of its own, and read rights checked now.
  const int fd = fd_ < 0 ? -1 : ::openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
  if (!d) {
    ec = std::error_code(fd_ < 0 ? EBADF : errno, std::generic_category());
    if (fd >= 0) ::close(fd);
    return out;
  }
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (!e) {
      if (errno) ec = std::error_code(errno, std::generic_category());
      break;
    }
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    out.push_back({std::string(name), e->d_type});
  }
  ::closedir(d);
  return out;
}

bool Dir::stat(const std::string& name, struct stat& st, bool follow) const {
  return ::fstatat(fd_, name.c_str(), &st, follow ? 0 : AT_SYMLINK_NOFOLLOW) == 0;
}

bool Dir::stat(struct stat& st) const {
  return ::fstat(fd_, &st) == 0;
}

Dir Dir::open(const std::string& name) const {
  return Dir(::openat(fd_, name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
}

std::optional<std::string> Dir::read_link(const std::string& name) const {
  std::string target(4096, '\0');
  const ssize_t n = ::readlinkat(fd_, name.c_str(), target.data(), target.size());
  if (n < 0) return std::nullopt;
  target.resize(size_t(n));
  return target;
}

std::optional<std::string> Dir::read_file(const std::string& name, size_t max) const {
  // O_NONBLOCK: a FIFO put in its place between a look and the open must not hold the daemon.
  const int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const Dir closing(fd);  // closes it
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) > max) return std::nullopt;
  std::string out(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;  // shorter than its size said: being rewritten
    got += size_t(n);
  }
  return out;
}

std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t at = path.rfind('/');
  if (at == std::string::npos) return {"", path};
  return {at == 0 ? "/" : path.substr(0, at), path.substr(at + 1)};
}

Dir open_dir(const std::string& path) {
  DirCache& c = cache();
  const auto now = Clock::now();
  auto checked = now;
  if (Dir d = c.take(path, now, &checked); d.ok() && alive(d)) return d;
  const auto [parent, name] = split_path(path);
  int fd = -1;
  Dir up = name.empty() || parent.empty() ? Dir() : c.take(parent, now, &checked);
  if (up.ok() && alive(up)) {
    fd = ::openat(up.fd(), name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  } else {
    checked = now;  // looked up whole
    fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0) return Dir();
  Dir d(fd);
  c.put(path, fd, checked);
  return d;
}

bool is_folder(const std::string& path) {
  const auto [parent, name] = split_path(path);
  struct stat st {};
  if (name.empty()) return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  const Dir up = open_dir(parent);
  return up.ok() && up.stat(name, st, true) && S_ISDIR(st.st_mode);
}

}  // namespace zm::ds
