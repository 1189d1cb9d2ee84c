#pragma once
// The virtual tree: inode numbers, names, attributes and how each file's bytes are made.
//
// Inode scheme: inode numbers count up from 1 (the root) and are never reused.
// Nothing is built before it is used: a real folder's entries are made the first time it is
// looked up in or listed (View::fill, which also indexes the tags it holds), so mounting a large
// experiments folder costs one listing. A folder may also have a LazyDir, which makes entries the
// first time they are looked up or listed (layouts/<any valid target>, a target's W rank files):
// such folders cost nothing until used, and a name keeps its meaning for the life of the mount.
// What a LazyDir made is forgotten once the kernel has forgotten it (Tree::forget): memory follows
// what the kernel holds and what is open, never what anyone has looked up; a name looked up again
// is made again, under a new inode. Other entries never disappear, so the kernel may cache every
// answer, except two: a `growing` folder (the root, a tag folder not served yet) may gain names when a new tag
// is indexed after the mount, so its negative entries and listing are not cached for long; and a
// `live` file (`latest`, `.zeromount/stats`) is rebuilt on every open, so its size is not cached.
// Appends take the tree's lock exclusively (Tree::append, or inside LazyDir::make); every read
// takes it shared, except on the thread that holds it exclusively, which may read freely.
#include <sys/types.h>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <list>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "zeromount/pt/virtual_file.h"

namespace zm::view {

using Builder = std::function<pt::VirtualFile()>;
// Computes a file's size without building it, where building would read tensor data.
using Sizer = std::function<uint64_t()>;

class Tree;
class Provider;

// Who may read an entry: permission bits (never a write bit) and owner. Real entries carry their
// source's; made-up ones carry what they are built from (see ProviderContext::add_top_dir).
struct Access {
  uint32_t perm = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool set = false;
};

// Who asks: a file that shows each reader what that reader may see (.zeromount/) is built for
// its caller. The default is the mounting user's own view, which sees everything.
struct Caller {
  int pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  // Whether `a` grants this caller all of `bits` (0444 read, 0111 search), as the kernel decides.
  bool may(const Access& a, uint32_t bits) const;
};
using CallerBuilder = std::function<pt::VirtualFile(const Caller&)>;

// Entries of one folder made on demand. make() runs under the tree's exclusive lock and adds
// entries with the Tree::add_* calls (it may look entries up too).
class LazyDir {
 public:
  virtual ~LazyDir() = default;
  // Before make(name), holding no lock of the tree: makes what make() will need that costs (a
  // partition plan: a model-state decode, O(params)), so that every other lookup and listing goes
  // on meanwhile instead of waiting on the tree's exclusive lock. make() must still be right when
  // prepare made nothing (a plan evicted in between is made again there). Errors are make()'s.
  virtual void prepare(std::string_view name) const {}
  // Makes entry `name` of folder `dir` (and whatever it holds) if the name is valid: its inode,
  // or 0 for "no such entry".
  virtual uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const = 0;
  // Names a listing shows after the folder's eager entries, each valid for make(). Made entries
  // that are not listed here are found by name only, so one thing has one listed name.
  virtual uint64_t listed() const { return 0; }
  virtual std::string listed_name(uint64_t k) const { return {}; }
};

// What only a folder has.
struct FolderData {
  std::vector<uint64_t> children;  // eager entries, in listing order
  std::unordered_map<std::string, uint64_t> by_name;
  std::shared_ptr<const LazyDir> lazy;
  // Folders that may gain entries while mounted (see the top of this file).
  mutable std::atomic<bool> growing{false};
  // Real folders: the folder of SRC shown here, and whether its entries are made yet (View::fill).
  // `plain`: its real entries only, never made-up ones (a tag folder, a copy in a faked layout).
  std::string real;
  bool plain = false;
  mutable std::atomic<bool> filled{true};
};

// What only a file has: either a builder, run on first open or stat, or a known size with a
// builder too. A live file's builder runs on every open and stat, and its content is never cached.
struct FileData {
  static constexpr uint64_t kUnknown = ~uint64_t(0);
  Builder build;
  Sizer sizer;
  // Its sizer lists and indexes folders (a page across the checkpoint folders of a run): a listing
  // does not ask it (View::attr_ready), a stat does.
  bool costly_sizer = false;
  bool live = false;
  CallerBuilder build_for;  // a live file whose content depends on who reads it
  mutable std::atomic<uint64_t> size{kUnknown};
};

// What only a symbolic link has: its target, as stored.
struct LinkData {
  std::string target;
};

// One entry: what every kind has, and its kind's own data (mountpoint-s3's InodeKindData), so
// that a folder cannot carry a builder nor a file a listing.
struct Inode {
  static constexpr uint64_t kUnknown = FileData::kUnknown;
  uint64_t ino = 0;
  uint64_t parent = 0;
  std::string name;
  struct timespec mtime {};
  // For an entry a Provider made beside the tags of a checkpoint folder, that Provider (its
  // identity: the one registered object of its kind); nullptr for real entries and for
  // everything below such an entry.
  const Provider* made_by = nullptr;
  // Unset: inherited from the nearest folder above that has one (files take its files_below).
  Access access;
  Access files_below;
  std::variant<FolderData, FileData, LinkData> kind;
  // Forgettable entries: one a LazyDir made may be dropped once the kernel holds no reference to
  // it (nlookup, FUSE's lookup count) and no file of it is open, and made again if looked up.
  bool made_lazily = false;
  std::list<uint64_t>::iterator made_at;  // its place in Tree's list of made entries
  mutable std::atomic<uint64_t> nlookup{0};
  mutable std::atomic<uint32_t> opens{0};

  bool is_dir() const { return std::holds_alternative<FolderData>(kind); }
  bool is_file() const { return std::holds_alternative<FileData>(kind); }
  // A file rebuilt on every open (FileData::live).
  bool is_live() const {
    const FileData* f = std::get_if<FileData>(&kind);
    return f && f->live;
  }
  const FolderData& folder() const { return std::get<FolderData>(kind); }
  FolderData& folder() { return std::get<FolderData>(kind); }
  const FileData& file() const { return std::get<FileData>(kind); }
  FileData& file() { return std::get<FileData>(kind); }
  // A symbolic link's target; nullptr for files and folders.
  const std::string* link() const {
    const LinkData* l = std::get_if<LinkData>(&kind);
    return l ? &l->target : nullptr;
  }
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
  // A real folder of SRC at `path`, whose entries are made when it is first used (View::fill).
  uint64_t add_real_dir(uint64_t parent, const std::string& name, struct timespec mtime, std::string path, bool plain);
  // Another name for a real entry `of`: the same bytes, link target or folder (then `plain`).
  uint64_t add_copy(uint64_t parent, const Inode& of);
  void set_filled(uint64_t dir) { node(dir).folder().filled.store(true); }
  // Folder `dir` shows real folder `path`, whose entries are not made yet.
  void make_real(uint64_t dir, std::string path) {
    node(dir).folder().real = std::move(path);
    node(dir).folder().filled.store(false);
  }
  // A file rebuilt on every open (its text follows the source, e.g. `latest`).
  uint64_t add_live_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build);
  // The same, built for the reader that opens it.
  uint64_t add_live_file(uint64_t parent, const std::string& name, struct timespec mtime, CallerBuilder build);
  void set_growing(uint64_t dir, bool growing) { node(dir).folder().growing.store(growing); }
  // Gives a file (a live one too) a Sizer: stat then sizes it without building it.
  void set_sizer(uint64_t file, Sizer sizer, bool costly) {
    node(file).file().sizer = std::move(sizer);
    node(file).file().costly_sizer = costly;
  }
  // Runs `f` with the tree's lock held exclusively: how entries are added after the mount.
  // Lookups and reads made by `f` itself (on this thread) do not lock again.
  void append(const std::function<void(Tree&)>& f);
  void set_lazy(uint64_t dir, std::shared_ptr<const LazyDir> lazy) { node(dir).folder().lazy = std::move(lazy); }
  void mark_made_by(uint64_t ino, const Provider& by) { node(ino).made_by = &by; }
  void set_access(uint64_t ino, Access self, Access files_below = {}) {
    node(ino).access = self;
    node(ino).files_below = files_below;
  }

  // nullptr when absent (after asking the folder's LazyDir, if it has one). `ref`: the kernel is
  // given the entry, which takes a reference to it (see forget).
  const Inode* lookup(uint64_t parent, std::string_view name, bool ref = false) const;
  // The entry at listing position k (eager entries, then the LazyDir's listed names), or nullptr.
  const Inode* listed_child(const Inode& dir, uint64_t k, bool ref = false) const;
  // The names folder `dir` holds now, eager and made (under the shared lock).
  std::vector<std::string> names(uint64_t dir) const;
  const Inode* get(uint64_t ino) const {
    Reading lock(*this);
    auto it = nodes_.find(ino);
    return it == nodes_.end() ? nullptr : it->second.get();
  }
  size_t size() const {  // entries held now
    Reading lock(*this);
    return nodes_.size();
  }
  uint64_t last_ino() const {  // the newest inode number handed out
    Reading lock(*this);
    return next_ - 1;
  }
  // The kernel dropped `count` references to `ino`. An entry a LazyDir made is forgotten with
  // what it holds once nothing refers to it; so are the lazily made entries of a folder the
  // kernel no longer holds that it never referred to (files a listing made). Returns how many
  // entries were dropped.
  size_t forget(uint64_t ino, uint64_t count);
  // Entries a LazyDir made beyond the newest `keep`, oldest first, as (folder, name): what the
  // kernel should be asked to let go of (the adapter invalidates them; the FORGET that follows
  // drops them), so that memory stays bounded however many names anyone looks up. Each entry
  // returned moves to the newest end: one the kernel keeps (open, a working folder) is asked
  // again only after the others.
  std::vector<std::pair<uint64_t, std::string>> surplus(size_t keep);
  size_t files() const {
    Reading lock(*this);
    return files_;
  }
  // Whether this thread holds some tree's exclusive lock (Tree::append, LazyDir::make): what a
  // plan counts to show it was made before that lock (LazyDir::prepare).
  static bool exclusive_here();

 private:
  uint64_t add(uint64_t parent, const std::string& name, std::unique_ptr<Inode> n, bool listed);
  Inode& node(uint64_t ino) { return *nodes_.at(ino); }
  // Whether `n` and everything below it may be dropped: nothing refers to it, nothing is open.
  bool unused(const Inode& n) const;
  size_t drop(const Inode& n);  // under the exclusive lock
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
  // Nodes by inode; a node's address is stable until it is dropped.
  std::unordered_map<uint64_t, std::unique_ptr<Inode>> nodes_;
  std::list<uint64_t> made_;  // what LazyDirs made, oldest first
  uint64_t next_ = 1;
  size_t files_ = 0;
  mutable std::shared_mutex mu_;  // lock order: src/view/core/checkpoint_folder.h
};

}  // namespace zm::view
