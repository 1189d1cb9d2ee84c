#pragma once
// The virtual tree: inode numbers, names, attributes and how each file's bytes are made.
//
// Inode scheme: inode numbers are 1-based positions in one append-only table (1 is the root).
// Most of the tree is built at mount. A folder may also have a LazyDir, which makes entries the
// first time they are looked up or listed (layouts/<any valid target>, a target's W rank files):
// such folders cost nothing until used, and a name, once made, keeps its inode and meaning for
// the life of the mount. Entries never disappear, so the kernel may cache every answer, except
// two: a `growing` folder (the root, a tag folder not served yet) may gain names when a new tag
// is indexed after the mount, so its negative entries and listing are not cached for long; and a
// `live` file (`latest`, `.zeromount/stats`) is rebuilt on every open, so its size is not cached.
// Appends take the tree's lock exclusively (Tree::append, or inside LazyDir::make); every read
// takes it shared, except on the thread that holds it exclusively, which may read freely.
#include <sys/types.h>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <deque>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "zeromount/pt/virtual_file.h"

namespace zm::view {

using Builder = std::function<pt::VirtualFile()>;
// Computes a file's size without building it, where building would read tensor data.
using Sizer = std::function<uint64_t()>;

class Tree;

// Who may read an entry: permission bits (never a write bit) and owner. Real entries carry their
// source's; made-up ones carry what they are built from (see ProviderContext::add_top_dir).
struct Access {
  uint32_t perm = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool set = false;
};

// Entries of one folder made on demand. make() runs under the tree's exclusive lock and adds
// entries with the Tree::add_* calls (it may look entries up too).
class LazyDir {
 public:
  virtual ~LazyDir() = default;
  // Makes entry `name` of folder `dir` (and whatever it holds) if the name is valid: its inode,
  // or 0 for "no such entry".
  virtual uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const = 0;
  // Names a listing shows after the folder's eager entries, each valid for make(). Made entries
  // that are not listed here are found by name only, so one thing has one listed name.
  virtual uint64_t listed() const { return 0; }
  virtual std::string listed_name(uint64_t k) const { return {}; }
};

struct Inode {
  uint64_t ino = 0;
  uint64_t parent = 0;
  std::string name;
  bool dir = false;
  std::string link;  // a symbolic link's target, as stored; empty for files and folders
  struct timespec mtime {};
  // For a top-level made-up entry, the Provider::kind() that made it; nullptr for real entries
  // and for everything below the top level.
  const char* made_by = nullptr;
  // Unset: inherited from the nearest folder above that has one (files take its files_below).
  Access access;
  Access files_below;
  // Directories
  std::vector<uint64_t> children;  // eager entries, in listing order
  std::unordered_map<std::string, uint64_t> by_name;
  std::shared_ptr<const LazyDir> lazy;
  // Folders that may gain entries while mounted (see the top of this file).
  mutable std::atomic<bool> growing{false};
  // Files: either a builder, run on first open or stat, or a known size with a builder too.
  // A live file's builder runs on every open and stat, and its content is never cached.
  Builder build;
  Sizer sizer;
  bool live = false;
  mutable std::atomic<uint64_t> size{kUnknown};
  static constexpr uint64_t kUnknown = ~uint64_t(0);

  Inode() = default;
  Inode(Inode&& o) noexcept
      : ino(o.ino),
        parent(o.parent),
        name(std::move(o.name)),
        dir(o.dir),
        link(std::move(o.link)),
        mtime(o.mtime),
        made_by(o.made_by),
        access(o.access),
        files_below(o.files_below),
        children(std::move(o.children)),
        by_name(std::move(o.by_name)),
        lazy(std::move(o.lazy)),
        growing(o.growing.load()),
        build(std::move(o.build)),
        sizer(std::move(o.sizer)),
        live(o.live),
        size(o.size.load()) {}
};

class Tree {
 public:
  static constexpr uint64_t kRoot = 1;  // FUSE_ROOT_ID
  explicit Tree(struct timespec root_mtime);

  // Appends: while the view is built, or inside LazyDir::make. `listed` false: found by name only.
  uint64_t add_dir(uint64_t parent, const std::string& name, struct timespec mtime, bool listed = true);
  uint64_t add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build,
                    uint64_t size = Inode::kUnknown, bool listed = true);
  uint64_t add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build, Sizer sizer,
                    bool listed = true);
  uint64_t add_link(uint64_t parent, const std::string& name, struct timespec mtime, std::string target);
  // A file rebuilt on every open (its text follows the source, e.g. `latest`).
  uint64_t add_live_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build);
  void set_growing(uint64_t dir, bool growing) { nodes_.at(dir - 1).growing.store(growing); }
  // Runs `f` with the tree's lock held exclusively: how entries are added after the mount.
  // Lookups and reads made by `f` itself (on this thread) do not lock again.
  void append(const std::function<void(Tree&)>& f);
  void set_lazy(uint64_t dir, std::shared_ptr<const LazyDir> lazy) { nodes_.at(dir - 1).lazy = std::move(lazy); }
  void mark_made_by(uint64_t ino, const char* kind) { nodes_.at(ino - 1).made_by = kind; }
  void set_access(uint64_t ino, Access self, Access files_below = {}) {
    nodes_.at(ino - 1).access = self;
    nodes_.at(ino - 1).files_below = files_below;
  }

  // nullptr when absent (after asking the folder's LazyDir, if it has one).
  const Inode* lookup(uint64_t parent, std::string_view name) const;
  // The entry at listing position k (eager entries, then the LazyDir's listed names), or nullptr.
  const Inode* listed_child(const Inode& dir, uint64_t k) const;
  const Inode* get(uint64_t ino) const {
    Reading lock(*this);
    return ino >= 1 && ino <= nodes_.size() ? &nodes_[ino - 1] : nullptr;
  }
  size_t size() const {
    Reading lock(*this);
    return nodes_.size();
  }
  size_t files() const {
    Reading lock(*this);
    return files_;
  }

 private:
  uint64_t add(uint64_t parent, const std::string& name, Inode&& n, bool listed);
  const Inode* find(const Inode& dir, std::string_view name) const;
  const Inode* make_lazy(const Inode& dir, std::string_view name) const;
  // The shared lock, unless this thread holds the exclusive one.
  class Reading {
   public:
    explicit Reading(const Tree& t);
    ~Reading();

   private:
    const Tree* locked_;
  };
  // A deque keeps node addresses stable while lazily made entries are appended.
  std::deque<Inode> nodes_;
  size_t files_ = 0;
  mutable std::shared_mutex mu_;
};

}  // namespace zm::view
