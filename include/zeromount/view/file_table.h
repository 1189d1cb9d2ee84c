#pragma once
// The real files a view reads from: opened once at mount (read-only), each with the identity it
// had then. A read that finds a file changed fails with ESTALE instead of serving mixed bytes.
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "zeromount/pt/file.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::view {

class FileTable : public pt::ExtentReader {
 public:
  // Registers a file (once per path) and returns its id.
  uint32_t add(const std::string& path);
  // Throws ESTALE if the file no longer has the identity it had at add() (size, mtime, inode).
  void pread(uint32_t file, uint64_t offset, void* buf, size_t n) const override;
  const std::string& path(uint32_t file) const { return files_.at(file)->file.path(); }
  const struct stat& stat(uint32_t file) const { return files_.at(file)->file.stat(); }
  int fd(uint32_t file) const { return files_.at(file)->file.fd(); }
  size_t size() const { return files_.size(); }
  // Checks a file against an identity recorded earlier (by the indexer).
  void expect(uint32_t file, uint64_t size, int64_t mtime_ns, uint64_t inode) const;

 private:
  struct Entry {
    pt::File file;
    mutable std::atomic<int64_t> path_checked_ns{0};
  };
  void check(const Entry& e) const;
  std::vector<std::unique_ptr<Entry>> files_;
  std::unordered_map<std::string, uint32_t> by_path_;
};

}  // namespace zm::view
