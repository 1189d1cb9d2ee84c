#include "zeromount/view/file_table.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/source_fs.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"

namespace zm::view {

namespace {

int64_t now_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

int64_t ctime_ns(const struct stat& s) {
  return int64_t(s.st_ctim.tv_sec) * 1000000000 + s.st_ctim.tv_nsec;
}

// What a rewrite changes: size, mtime, inode. A ctime that moved alone is either a change of the
// inode's metadata (a chmod, chown or link, even one that sets what was there: `chmod -R a+rX`,
// `touch -a`) or an overwrite that put the mtime back: FileTable::check tells them apart by the
// pickle.
enum class Identity { Same, CtimeMoved, Changed };
Identity compare(const struct stat& was, const struct stat& now, int64_t ctime_accepted) {
  if (was.st_size != now.st_size || pt::mtime_ns(was) != pt::mtime_ns(now) || was.st_ino != now.st_ino ||
      was.st_dev != now.st_dev)
    return Identity::Changed;
  const bool metadata_changed = was.st_mode != now.st_mode || was.st_uid != now.st_uid || was.st_gid != now.st_gid ||
                                was.st_nlink != now.st_nlink;
  if (ctime_ns(was) == ctime_ns(now) || ctime_ns(now) == ctime_accepted || metadata_changed) return Identity::Same;
  return Identity::CtimeMoved;
}

[[noreturn]] void stale(const std::string& path) {
  throw Error(where(path, "changed since it was mounted; remount to see the new checkpoint"), ESTALE);
}

}  // namespace

uint32_t FileTable::add(const std::string& path) {
  {
    std::shared_lock lock(table_mu_);
    auto it = by_path_.find(path);
    if (it != by_path_.end()) return it->second;
  }
  auto e = std::make_unique<Entry>();
  e->path = path;
  // Relative to its folder, which the fill has just listed (ds::open_dir keeps it): a stat by path
  // would cost a step per folder above it.
  const auto [folder, name] = ds::split_path(path);
  const ds::Dir dir = name.empty() || folder.empty() ? ds::Dir() : ds::open_dir(folder);
  if (dir.ok() ? !dir.stat(name, e->st, true) : ::stat(path.c_str(), &e->st) != 0)
    throw Error(where(path, std::string("cannot stat: ") + strerror(errno)), errno);
  if (!S_ISREG(e->st.st_mode)) throw FormatError(where(path, "not a regular file"));
  std::unique_lock lock(table_mu_);
  if (auto it = by_path_.find(path); it != by_path_.end()) return it->second;
  const auto id = uint32_t(files_.size());
  files_.push_back(std::move(e));
  by_path_.emplace(path, id);
  return id;
}

const FileTable::Entry& FileTable::entry(uint32_t id) const {
  std::shared_lock lock(table_mu_);
  return *files_.at(id);
}

size_t FileTable::size() const {
  std::shared_lock lock(table_mu_);
  return files_.size();
}

void FileTable::expect(uint32_t file, uint64_t size, int64_t mtime, uint64_t inode, uint64_t pickle_hash) const {
  const Entry& e = entry(file);
  const struct stat& s = e.st;
  if (uint64_t(s.st_size) != size || pt::mtime_ns(s) != mtime || uint64_t(s.st_ino) != inode)
    throw Error(where(path(file), "changed while it was being indexed"), ESTALE);
  e.pickle_hash.store(pickle_hash, std::memory_order_relaxed);
}

void FileTable::verify(const Entry& e, const pt::File& f, const struct stat& now) const {
  switch (compare(e.st, now, e.ctime_accepted.load(std::memory_order_relaxed))) {
    case Identity::Same:
      return;
    case Identity::Changed:
      stale(e.path);
    case Identity::CtimeMoved: {
      // Nothing of the inode explains the new ctime: the pickle it was indexed with decides (the
      // tensors' bytes are not hashed: an overwrite of tensor bytes alone that restores the mtime
      // is not seen, as README says). Once per new ctime.
      const uint64_t want = e.pickle_hash.load(std::memory_order_relaxed);
      uint64_t got = 0;
      try {
        got = want ? pt::pickle_hash(f) : 0;
      } catch (const FormatError&) {  // no longer a zip; an I/O error stays one
        stale(e.path);
      }
      if (!want || got != want) stale(e.path);
      e.ctime_accepted.store(ctime_ns(now), std::memory_order_relaxed);
      spdlog::info("{}: its ctime moved and its pickle did not: reads go on", e.path);
      return;
    }
  }
}

size_t FileTable::open_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_lru_.size();
}

std::shared_ptr<const pt::File> FileTable::descriptor(uint32_t id) const {
  const Entry& e = entry(id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.open) {
      open_lru_.splice(open_lru_.begin(), open_lru_, e.lru);
      return e.open;
    }
  }
  // Opened outside the lock: an open can block (NFS, a slow disk) and must not stall other reads.
  auto f = std::make_shared<const pt::File>(e.path);
  verify(e, *f, f->stat());
  // On a network or object-storage client, the kernel's readahead past an extent is bytes fetched
  // for nothing (a gap between one rank's pieces) and breaks the client's sequential stream into
  // a new range request: read exactly the extents asked for (bench/README.md, remote.py).
  if (!ds::network_filesystem(f->fd()).empty()) {
    ::posix_fadvise(f->fd(), 0, 0, POSIX_FADV_RANDOM);
    e.network.store(true, std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (e.open) return e.open;  // another thread opened it meanwhile
  e.open = f;
  open_lru_.push_front(id);
  e.lru = open_lru_.begin();
  while (open_lru_.size() > kMaxOpen) {  // readers still holding the old descriptor keep it alive
    entry(open_lru_.back()).open.reset();
    for (auto& c : entry(open_lru_.back()).streams)
      if (!c.busy) c.file.reset();
    open_lru_.pop_back();
  }
  return f;
}

void FileTable::check(const Entry& e, const pt::File& f) const {
  struct stat now;
  // A descriptor that cannot be asked is a source that does not answer, never "changed".
  if (fstat(f.fd(), &now) != 0) throw Error(where(e.path, std::string("cannot stat: ") + strerror(errno)), EIO);
  verify(e, f, now);
  // A file replaced by rename keeps our descriptor on the old inode; notice it at most every 100 ms.
  const int64_t t = now_ns();
  if (t - e.path_checked_ns.load(std::memory_order_relaxed) > 100'000'000) {
    // A source that does not answer (a network client whose backend went away) is an I/O error,
    // never "changed": only a path that now names another inode, or none, is.
    const int err = ::stat(e.path.c_str(), &now) == 0 ? 0 : errno;
    if (err && err != ENOENT) throw Error(where(e.path, std::string("cannot stat: ") + strerror(err)), EIO);
    if (err == ENOENT || now.st_ino != e.st.st_ino || now.st_dev != e.st.st_dev)
      throw Error(where(e.path, "was replaced since it was mounted; remount to see the new checkpoint"), ESTALE);
    e.path_checked_ns.store(t, std::memory_order_relaxed);
  }
}

// An object-storage client (rclone, s3fs, mountpoint-s3) serves each open file from one ranged
// GET stream: a read where the stream is continues it, any other read ends it and starts another,
// whose first chunk is fetched whole. Two threads reading two places of one shard (two ranks'
// pieces, or readahead of two files built from it) would restart it at every request, fetching a
// chunk each time for a few KiB. So each sequential reader gets a descriptor of its own (up to
// four per file; past that the shared one), and reads go in file order, one FUSE request at a time.
void FileTable::read_network(const Entry& e, const std::shared_ptr<const pt::File>& shared, uint64_t offset, void* buf,
                             size_t n) const {
  Entry::Stream* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : e.streams)  // the reader that ended where this read starts
      if (!c.busy && c.file && c.next == offset) s = &c;
    for (auto& c : e.streams)  // else a descriptor not opened yet
      if (!s && !c.busy && !c.file) s = &c;
    for (auto& c : e.streams)  // else any idle one
      if (!s && !c.busy) s = &c;
    if (s) s->busy = true;
  }
  std::shared_ptr<const pt::File> f = s ? s->file : shared;
  try {
    if (!f) {
      f = std::make_shared<const pt::File>(e.path);
      verify(e, *f, f->stat());
      ::posix_fadvise(f->fd(), 0, 0, POSIX_FADV_RANDOM);
    }
    constexpr size_t kStep = 128 << 10;  // the FUSE clients' max_read: larger reads go out in parallel
    for (size_t done = 0; done < n; done += std::min(kStep, n - done))
      f->read_exact(offset + done, static_cast<char*>(buf) + done, std::min(kStep, n - done), "source range");
  } catch (...) {
    if (s) {
      std::lock_guard<std::mutex> lock(mu_);
      s->file.reset();  // a failed stream is not reused
      s->busy = false;
    }
    throw;
  }
  if (s) {
    std::lock_guard<std::mutex> lock(mu_);
    s->file = f;
    s->next = offset + n;
    s->busy = false;
  }
}

void FileTable::set_deadline(std::chrono::milliseconds deadline) {
  deadline_ = deadline;
  // Four reads below at once: what a network client serves in parallel, and a bound on the
  // buffers of reads nobody waits for any more (four pieces).
  reads_ = deadline.count() > 0 ? std::make_unique<OffPath>(4) : nullptr;
}

void FileTable::pread(uint32_t file, uint64_t offset, void* buf, size_t n) const {
  if (!reads_) return read_here(file, offset, buf, n);
  const auto seconds = [&] { return fmt::format("{:g} s", double(deadline_.count()) / 1000); };
  constexpr size_t kPiece = 4 << 20;  // each piece has the whole deadline; a buffer each
  for (size_t done = 0; done < n;) {
    const size_t piece = std::min(kPiece, n - done);
    // While a read the source never answered is pending below, one read at a time tries the source
    // (it comes back as soon as the backend does) and the others fail at once: a gone backend
    // never holds every worker thread.
    bool probe = false;
    if (reads_->overdue()) {
      if (probing_.exchange(true))
        throw Error(where(path(file), "not read: a read of the source has had no answer for over " + seconds() +
                                          "; reads fail at once until it answers"),
                    EIO);
      probe = true;
    }
    struct EndProbe {
      std::atomic<bool>* probing;
      ~EndProbe() {
        if (probing) *probing = false;
      }
    } end_probe{probe ? &probing_ : nullptr};
    auto bytes = std::make_shared<std::vector<char>>();
    const uint64_t at = offset + done;
    if (!reads_->run(
            [this, file, at, piece, bytes] {
              bytes->resize(piece);
              read_here(file, at, bytes->data(), piece);
            },
            deadline_))
      throw Error(where(path(file), "no answer from the source in " + seconds() + " (-o source_timeout)"), EIO);
    std::memcpy(static_cast<char*>(buf) + done, bytes->data(), piece);
    done += piece;
  }
}

void FileTable::read_here(uint32_t file, uint64_t offset, void* buf, size_t n) const {
  const Entry& e = entry(file);
  std::shared_ptr<const pt::File> f;
  try {
    f = descriptor(file);
  } catch (const Error& err) {
    // A deleted file cannot be opened: that is a change since the mount, not a missing file.
    if (err.errno_value() == ENOENT) throw Error(where(e.path, "was deleted since it was mounted"), ESTALE);
    throw;
  }
  check(e, *f);
  if (e.network.load(std::memory_order_relaxed))
    read_network(e, f, offset, buf, n);
  else
    f->read_exact(offset, buf, n, "source range");
  check(e, *f);  // a change during the read must not reach the reader as mixed bytes
  bytes_read_.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace zm::view
