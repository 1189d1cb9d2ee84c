#pragma once
// The real files a view reads from, each with the identity it had when the view was built.
// Files are opened on first read and closed when idle (at most kMaxOpen at once), so that a mount
// of a folder with more files than the descriptor limit works, and a deleted source does not stay
// allocated behind open descriptors. A read that finds a file changed fails with ESTALE instead of
// serving mixed bytes. Files may be added while others are read (a tag indexed after the mount).
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "zeromount/pt/file.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/off_path.h"

namespace zm::view {

class FileTable : public pt::ExtentReader {
 public:
  static constexpr size_t kMaxOpen = 256;

  // Registers a file (once per path) and returns its id. Only stats it: nothing is opened.
  uint32_t add(const std::string& path);
  // Throws ESTALE if the file no longer has the identity it had at add() (size, mtime, inode, and
  // a ctime that moved alone only if its pickle changed too), and the open error (EACCES, ENOENT,
  // ...) if it cannot be opened. With a deadline set, EIO when the source does not answer in time.
  void pread(uint32_t file, uint64_t offset, void* buf, size_t n) const override;
  // A network source (-o source_timeout=S, issue 40): reads run off the request path, each piece
  // answered within `deadline` or failed with EIO naming the file; while a read the source never
  // answered is still pending below, one read at a time tries it and the others fail at once.
  // Call before the first read of a request (View::start_serving).
  void set_deadline(std::chrono::milliseconds deadline);
  // Reads not answered within the deadline, since the start (.zeromount/stats: source_timeouts).
  uint64_t timeouts() const { return reads_ ? reads_->timeouts() : 0; }
  const std::string& path(uint32_t file) const { return entry(file).path; }
  const struct stat& stat(uint32_t file) const { return entry(file).st; }
  size_t size() const;
  size_t open_count() const;
  // Bytes served from the real files so far (for .zeromount/stats).
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  // Checks a file against an identity recorded earlier (by the indexer), and keeps the XXH3 of its
  // pickle (0: none) to tell a chmod from an overwrite that restored the mtime.
  void expect(uint32_t file, uint64_t size, int64_t mtime_ns, uint64_t inode, uint64_t pickle_hash = 0) const;

 private:
  struct Entry {
    std::string path;
    struct stat st {};
    mutable std::shared_ptr<const pt::File> open;  // guarded by mu_
    mutable std::list<uint32_t>::iterator lru;     // position in open_lru_ while open
    mutable std::atomic<int64_t> path_checked_ns{0};
    mutable std::atomic<bool> network{false};  // on a network filesystem or object-storage client
    mutable std::atomic<uint64_t> pickle_hash{0};
    mutable std::atomic<int64_t> ctime_accepted{-1};  // a later ctime whose file kept its pickle
    // Network files: a descriptor per sequential reader (guarded by mu_), since an object-storage
    // client keeps one range stream per open file and a read away from its position opens another.
    struct Stream {
      std::shared_ptr<const pt::File> file;
      uint64_t next = 0;  // where its last read ended
      bool busy = false;
    };
    mutable Stream streams[4];
  };
  const Entry& entry(uint32_t id) const;
  std::shared_ptr<const pt::File> descriptor(uint32_t id) const;
  void check(const Entry& e, const pt::File& f) const;
  void verify(const Entry& e, const pt::File& f, const struct stat& now) const;
  void read_network(const Entry& e, const std::shared_ptr<const pt::File>& shared, uint64_t offset, void* buf,
                    size_t n) const;
  void read_here(uint32_t file, uint64_t offset, void* buf, size_t n) const;
  std::vector<std::unique_ptr<Entry>> files_;  // guarded by table_mu_; the entries never move
  std::unordered_map<std::string, uint32_t> by_path_;
  mutable std::shared_mutex table_mu_;  // lock order: src/view/core/checkpoint_folder.h
  mutable std::atomic<uint64_t> bytes_read_{0};
  mutable std::mutex mu_;                 // the open descriptors (lock order: src/view/core/checkpoint_folder.h)
  mutable std::list<uint32_t> open_lru_;  // most recently used first
  std::chrono::milliseconds deadline_{0};
  mutable std::atomic<bool> probing_{false};  // a read trying a source that has not answered
  std::unique_ptr<OffPath> reads_;            // last: its threads read the members above until it is gone
};

}  // namespace zm::view
