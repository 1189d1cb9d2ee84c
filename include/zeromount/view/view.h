#pragma once
// The whole mounted view of one checkpoint folder: the real tree, read-only and byte-identical,
// plus a made-up <tag>_universal folder per ZeRO tag. The FUSE adapter is a thin layer over this.
#include <sys/stat.h>

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/view/file_table.h"
#include "zeromount/view/tree.h"
#include "zeromount/view/universal.h"

namespace zm::view {

struct ViewOptions {
  bool bare_zero3_tensors = false;  // stage-3 sources: param files as bare tensors (DeepSpeed < 0.19.3)
  size_t cache_bytes = 16u << 20;   // built headers kept in memory; tensor bytes are never cached
};

struct MountStats {
  size_t tags = 0, params = 0, files = 0, nodes = 0, shards = 0, cache_hits = 0;
  uint64_t state_bytes = 0;
  double index_seconds = 0;
};

class View {
 public:
  // Scans and indexes `source`. Throws zm::Error naming the file (and parameter) if any ZeRO tag
  // cannot be indexed; the mount is then refused.
  static std::unique_ptr<View> open(const std::string& source, const ViewOptions& opts = {});

  const Tree& tree() const { return tree_; }
  const MountStats& stats() const { return stats_; }
  // Attributes as the kernel sees them: files 0444, folders 0555, sizes exact.
  struct stat attr(const Inode& n) const;
  // The bytes of a file, built on first use and kept in a bounded cache.
  std::shared_ptr<const pt::VirtualFile> content(const Inode& n) const;
  size_t read(const pt::VirtualFile& f, uint64_t offset, void* buf, size_t n) const {
    return f.read(offset, buf, n, files_);
  }
  const FileTable& files() const { return files_; }
  std::string describe(const Inode& n) const;  // path inside the mount, for log lines

 private:
  View(const ViewOptions& opts, struct timespec mtime) : opts_(opts), tree_(mtime) {}
  void mirror(const std::string& real_dir, uint64_t dir);
  void add_universal(uint64_t parent, const std::string& name, const MountedTag& tag, struct timespec mtime);
  void add_params(uint64_t parent, const std::string& name, const MountedTag& tag, struct timespec mtime);
  void add_fp32(uint64_t parent, const std::string& name, const MountedTag& tag, struct timespec mtime);
  uint64_t add_passthrough(uint64_t parent, const std::string& name, const std::string& path);

  ViewOptions opts_;
  Tree tree_;
  FileTable files_;
  std::vector<std::unique_ptr<ds::TagIndex>> indexes_;
  std::vector<std::unique_ptr<MountedTag>> tags_;
  MountStats stats_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;

  // LRU of built files, by inode, bounded by cache_bytes.
  mutable std::mutex cache_mu_;
  mutable std::list<std::pair<uint64_t, std::shared_ptr<const pt::VirtualFile>>> lru_;
  mutable std::unordered_map<uint64_t, decltype(lru_)::iterator> cached_;
  mutable size_t cached_bytes_ = 0;
};

// Folder name for a parameter: '%' and '/' are percent-encoded, "." and ".." become "%2E" and
// "%2E%2E"; a name over 255 bytes is cut and suffixed with its hash (its info file keeps it whole).
std::string param_dir_name(std::string_view name);

}  // namespace zm::view
