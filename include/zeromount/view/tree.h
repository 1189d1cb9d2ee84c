#pragma once
// The virtual tree: inode numbers, names, attributes and how each file's bytes are made.
// Built once at mount and immutable afterwards, so lookups need no locks; only the sizes of
// lazily built files are filled in on first use.
#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "zeromount/pt/virtual_file.h"

namespace zm::view {

using Builder = std::function<pt::VirtualFile()>;
// Computes a file's size without building it, where building would read tensor data.
using Sizer = std::function<uint64_t()>;

struct Inode {
  uint64_t ino = 0;
  uint64_t parent = 0;
  std::string name;
  bool dir = false;
  struct timespec mtime {};
  // For a top-level made-up entry, the Provider::kind() that made it; nullptr for real entries
  // and for everything below the top level.
  const char* made_by = nullptr;
  // Directories
  std::vector<uint64_t> children;  // in listing order
  std::unordered_map<std::string, uint64_t> by_name;
  // Files: either a builder, run on first open or stat, or a known size with a builder too.
  Builder build;
  Sizer sizer;
  mutable std::atomic<uint64_t> size{kUnknown};
  static constexpr uint64_t kUnknown = ~uint64_t(0);

  Inode() = default;
  Inode(Inode&& o) noexcept
      : ino(o.ino),
        parent(o.parent),
        name(std::move(o.name)),
        dir(o.dir),
        mtime(o.mtime),
        made_by(o.made_by),
        children(std::move(o.children)),
        by_name(std::move(o.by_name)),
        build(std::move(o.build)),
        sizer(std::move(o.sizer)),
        size(o.size.load()) {}
};

class Tree {
 public:
  static constexpr uint64_t kRoot = 1;  // FUSE_ROOT_ID
  explicit Tree(struct timespec root_mtime);

  uint64_t add_dir(uint64_t parent, const std::string& name, struct timespec mtime);
  uint64_t add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build,
                    uint64_t size = Inode::kUnknown);
  uint64_t add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build, Sizer sizer);
  void mark_made_by(uint64_t ino, const char* kind) { nodes_.at(ino - 1).made_by = kind; }
  // nullptr when absent.
  const Inode* lookup(uint64_t parent, std::string_view name) const;
  const Inode* get(uint64_t ino) const { return ino >= 1 && ino <= nodes_.size() ? &nodes_[ino - 1] : nullptr; }
  size_t size() const { return nodes_.size(); }
  size_t files() const { return files_; }

 private:
  uint64_t add(uint64_t parent, const std::string& name, Inode&& n);
  std::vector<Inode> nodes_;
  size_t files_ = 0;
};

}  // namespace zm::view
