#include "zeromount/view/file_table.h"

#include <time.h>

#include "zeromount/pt/error.h"

namespace zm::view {

namespace {
int64_t now_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}
}  // namespace

uint32_t FileTable::add(const std::string& path) {
  auto it = by_path_.find(path);
  if (it != by_path_.end()) return it->second;
  auto e = std::make_unique<Entry>();
  e->file = pt::File(path);
  const auto id = uint32_t(files_.size());
  files_.push_back(std::move(e));
  by_path_.emplace(path, id);
  return id;
}

void FileTable::expect(uint32_t file, uint64_t size, int64_t mtime, uint64_t inode) const {
  const struct stat& s = files_.at(file)->file.stat();
  if (uint64_t(s.st_size) != size || pt::mtime_ns(s) != mtime || uint64_t(s.st_ino) != inode)
    throw Error(where(path(file), "changed while it was being indexed"), ESTALE);
}

void FileTable::check(const Entry& e) const {
  const struct stat& was = e.file.stat();
  struct stat now;
  if (fstat(e.file.fd(), &now) != 0 || now.st_size != was.st_size || pt::mtime_ns(now) != pt::mtime_ns(was))
    throw Error(where(e.file.path(), "changed since it was mounted; remount to see the new checkpoint"), ESTALE);
  // A file replaced by rename keeps our descriptor on the old inode; notice it at most every 100 ms.
  const int64_t t = now_ns();
  if (t - e.path_checked_ns.load(std::memory_order_relaxed) > 100'000'000) {
    if (::stat(e.file.path().c_str(), &now) != 0 || now.st_ino != was.st_ino || now.st_dev != was.st_dev)
      throw Error(where(e.file.path(), "was replaced since it was mounted; remount to see the new checkpoint"), ESTALE);
    e.path_checked_ns.store(t, std::memory_order_relaxed);
  }
}

void FileTable::pread(uint32_t file, uint64_t offset, void* buf, size_t n) const {
  const Entry& e = *files_.at(file);
  check(e);
  e.file.read_exact(offset, buf, n, "source range");
  check(e);  // a change during the read must not reach the reader as mixed bytes
}

}  // namespace zm::view
