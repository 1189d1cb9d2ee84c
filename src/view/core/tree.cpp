#include "zeromount/view/tree.h"

#include <algorithm>
#include <mutex>

#include "zeromount/pt/error.h"

namespace zm::view {

namespace {
// The tree whose exclusive lock this thread holds (Tree::append, LazyDir::make), if any.
thread_local const Tree* t_appending = nullptr;

// Marks this thread as the holder of `t`'s exclusive lock for its scope.
class Appending {
 public:
  explicit Appending(const Tree* t) : prev_(t_appending) { t_appending = t; }
  ~Appending() { t_appending = prev_; }

 private:
  const Tree* prev_;
};
}  // namespace

bool Tree::exclusive_here() {
  return t_appending != nullptr;
}

Tree::Reading::Reading(const Tree& t) : locked_(t_appending == &t ? nullptr : &t) {
  if (locked_) locked_->mu_.lock_shared();
}

Tree::Reading::~Reading() {
  if (locked_) locked_->mu_.unlock_shared();
}

void Tree::append(const std::function<void(Tree&)>& f) {
  if (t_appending == this) return f(*this);
  std::unique_lock lock(mu_);
  Appending mark(this);
  f(*this);
}

Tree::Tree(struct timespec root_mtime) {
  auto root = std::make_unique<Inode>();
  root->ino = kRoot;
  root->parent = kRoot;
  root->kind.emplace<FolderData>();
  root->mtime = root_mtime;
  nodes_.emplace(kRoot, std::move(root));
  next_ = kRoot + 1;
}

uint64_t Tree::add(uint64_t parent, const std::string& name, std::unique_ptr<Inode> n, bool listed) {
  auto at = nodes_.find(parent);
  Inode* p = at == nodes_.end() ? nullptr : at->second.get();
  if (!p || !p->is_dir()) throw Error("view: parent of '" + name + "' is not a folder");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.size() > 255)
    throw Error("view: '" + name + "' cannot be a file name");
  FolderData& folder = p->folder();
  if (folder.by_name.count(name)) throw Error("view: '" + name + "' exists twice in one folder");
  const uint64_t ino = next_++;
  n->ino = ino;
  n->parent = parent;
  n->name = name;
  if (n->is_file()) ++files_;
  folder.by_name.emplace(name, ino);
  if (listed) folder.children.push_back(ino);
  nodes_.emplace(ino, std::move(n));
  return ino;
}

uint64_t Tree::add_dir(uint64_t parent, const std::string& name, struct timespec mtime, bool listed) {
  auto n = std::make_unique<Inode>();
  n->kind.emplace<FolderData>();
  n->mtime = mtime;
  return add(parent, name, std::move(n), listed);
}

uint64_t Tree::add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build, uint64_t size,
                        bool listed) {
  auto n = std::make_unique<Inode>();
  n->mtime = mtime;
  FileData& file = n->kind.emplace<FileData>();
  file.build = std::move(build);
  file.size = size;
  return add(parent, name, std::move(n), listed);
}

uint64_t Tree::add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build, Sizer sizer,
                        bool listed) {
  const uint64_t ino = add_file(parent, name, mtime, std::move(build), Inode::kUnknown, listed);
  node(ino).file().sizer = std::move(sizer);
  return ino;
}

uint64_t Tree::add_link(uint64_t parent, const std::string& name, struct timespec mtime, std::string target) {
  auto n = std::make_unique<Inode>();
  n->mtime = mtime;
  n->kind.emplace<LinkData>().target = std::move(target);
  return add(parent, name, std::move(n), true);
}

uint64_t Tree::add_real_dir(uint64_t parent, const std::string& name, struct timespec mtime, std::string path,
                            bool plain) {
  auto n = std::make_unique<Inode>();
  n->mtime = mtime;
  FolderData& folder = n->kind.emplace<FolderData>();
  folder.real = std::move(path);
  folder.plain = plain;
  folder.filled = false;
  return add(parent, name, std::move(n), true);
}

uint64_t Tree::add_copy(uint64_t parent, const Inode& of) {
  if (of.is_dir()) {
    const uint64_t d = add_real_dir(parent, of.name, of.mtime, of.folder().real, true);
    node(d).access = of.access;
    return d;
  }
  auto n = std::make_unique<Inode>();
  n->mtime = of.mtime;
  n->access = of.access;
  if (const std::string* target = of.link()) {
    n->kind.emplace<LinkData>().target = *target;
  } else {
    FileData& file = n->kind.emplace<FileData>();
    file.build = of.file().build;
    file.sizer = of.file().sizer;
    file.costly_sizer = of.file().costly_sizer;
    file.size = of.file().size.load();
  }
  return add(parent, of.name, std::move(n), true);
}

bool Tree::unused(const Inode& n) const {
  if (n.nlookup.load() || n.opens.load()) return false;
  if (n.is_dir())
    for (const auto& [name, ino] : n.folder().by_name)
      if (!unused(*nodes_.at(ino))) return false;
  return true;
}

size_t Tree::drop(const Inode& n) {
  size_t dropped = 0;
  std::vector<uint64_t> below;
  if (n.is_dir())
    for (const auto& [name, ino] : n.folder().by_name) below.push_back(ino);
  for (uint64_t ino : below) dropped += drop(*nodes_.at(ino));
  FolderData& p = node(n.parent).folder();
  p.by_name.erase(n.name);
  std::erase(p.children, n.ino);
  if (n.is_file()) --files_;
  if (n.made_lazily) made_.erase(n.made_at);
  nodes_.erase(n.ino);  // n is gone from here on
  return dropped + 1;
}

size_t Tree::forget(uint64_t ino, uint64_t count) {
  std::unique_lock lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return 0;
  Inode& n = *it->second;
  const uint64_t had = n.nlookup.load();
  n.nlookup.store(had > count ? had - count : 0);
  if (n.nlookup.load()) return 0;
  if (n.made_lazily && unused(n)) return drop(n);
  if (!n.is_dir()) return 0;
  // A folder the kernel let go of: what a listing made in it, and nothing refers to, goes too.
  size_t dropped = 0;
  std::vector<const Inode*> made;
  for (const auto& [name, c] : n.folder().by_name)
    if (const Inode& child = *nodes_.at(c); child.made_lazily && unused(child)) made.push_back(&child);
  for (const Inode* c : made) dropped += drop(*c);
  return dropped;
}

std::vector<std::pair<uint64_t, std::string>> Tree::surplus(size_t keep) {
  std::unique_lock lock(mu_);
  std::vector<std::pair<uint64_t, std::string>> out;
  for (size_t over = made_.size() > keep ? made_.size() - keep : 0; over > 0; --over) {
    Inode& n = node(made_.front());
    out.emplace_back(n.parent, n.name);
    made_.splice(made_.end(), made_, made_.begin());
  }
  return out;
}

const Inode* Tree::find(const Inode& dir, std::string_view name) const {
  const FolderData& folder = dir.folder();
  auto it = folder.by_name.find(std::string(name));
  return it == folder.by_name.end() ? nullptr : nodes_.at(it->second).get();
}

uint64_t Tree::add_live_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build) {
  const uint64_t ino = add_file(parent, name, mtime, std::move(build));
  node(ino).file().live = true;
  return ino;
}

uint64_t Tree::add_live_file(uint64_t parent, const std::string& name, struct timespec mtime, CallerBuilder build) {
  const uint64_t ino = add_live_file(parent, name, mtime, Builder([] { return pt::VirtualFile(); }));
  node(ino).file().build_for = std::move(build);
  return ino;
}

bool Caller::may(const Access& a, uint32_t bits) const {
  if (uid == 0) return true;
  uint32_t granted = a.perm & 0007;
  if (uid == a.uid)
    granted = (a.perm >> 6) & 7;
  else if (gid == a.gid || std::find(groups.begin(), groups.end(), a.gid) != groups.end())
    granted = (a.perm >> 3) & 7;
  const uint32_t want = (bits | bits >> 3 | bits >> 6) & 7;
  return (granted & want) == want;
}

const Inode* Tree::make_lazy(const Inode& dir, std::string_view name) const {
  // Lazily made entries are appended, never changed: the tree stays logically const.
  Tree& tree = const_cast<Tree&>(*this);
  const uint64_t ino = dir.folder().lazy->make(tree, dir.ino, name);
  if (!ino) return nullptr;
  Inode& made = tree.node(ino);
  made.made_lazily = true;
  made.made_at = tree.made_.insert(tree.made_.end(), ino);
  return &made;
}

const Inode* Tree::lookup(uint64_t parent, std::string_view name, bool ref) const {
  const Inode* p = get(parent);
  if (!p || !p->is_dir()) return nullptr;
  if (name == ".") return p;
  if (name == "..") return get(p->parent);
  // The reference is taken under the lock, so that a forget in between cannot drop the entry.
  const auto held = [ref](const Inode* n) {
    if (n && ref) n->nlookup.fetch_add(1, std::memory_order_relaxed);
    return n;
  };
  if (t_appending == this) {
    if (const Inode* n = find(*p, name)) return held(n);
    return held(p->folder().lazy ? make_lazy(*p, name) : nullptr);
  }
  std::shared_ptr<const LazyDir> lazy;
  {
    std::shared_lock lock(mu_);
    if (const Inode* n = find(*p, name)) return held(n);
    if (!(lazy = p->folder().lazy)) return nullptr;
  }
  lazy->prepare(name);  // what costs, made holding no tree lock
  std::unique_lock lock(mu_);
  Appending mark(this);
  if (const Inode* n = find(*p, name)) return held(n);  // made by another thread meanwhile
  return held(make_lazy(*p, name));
}

std::vector<std::string> Tree::names(uint64_t dir) const {
  Reading lock(*this);
  std::vector<std::string> out;
  for (const auto& [name, ino] : nodes_.at(dir)->folder().by_name) out.push_back(name);
  return out;
}

const Inode* Tree::listed_child(const Inode& dir, uint64_t k, bool ref) const {
  const FolderData& folder = dir.folder();
  {
    Reading lock(*this);
    if (k < folder.children.size()) {
      const Inode* n = nodes_.at(folder.children[k]).get();
      if (ref) n->nlookup.fetch_add(1, std::memory_order_relaxed);
      return n;
    }
    if (!folder.lazy || k - folder.children.size() >= folder.lazy->listed()) return nullptr;
  }
  const std::string name = folder.lazy->listed_name(k - folder.children.size());
  const Inode* n = lookup(dir.ino, name, ref);
  if (!n) throw Error("view: listed entry '" + name + "' cannot be made", EIO);
  return n;
}

}  // namespace zm::view
