#include "zeromount/view/tree.h"

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
  Inode root;
  root.ino = kRoot;
  root.parent = kRoot;
  root.dir = true;
  root.mtime = root_mtime;
  nodes_.push_back(std::move(root));
}

uint64_t Tree::add(uint64_t parent, const std::string& name, Inode&& n, bool listed) {
  Inode* p = parent >= 1 && parent <= nodes_.size() ? &nodes_[parent - 1] : nullptr;
  if (!p || !p->dir) throw Error("view: parent of '" + name + "' is not a folder");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.size() > 255)
    throw Error("view: '" + name + "' cannot be a file name");
  if (p->by_name.count(name)) throw Error("view: '" + name + "' exists twice in one folder");
  n.ino = nodes_.size() + 1;
  n.parent = parent;
  n.name = name;
  p->by_name.emplace(name, n.ino);
  if (listed) p->children.push_back(n.ino);
  nodes_.push_back(std::move(n));
  return nodes_.size();
}

uint64_t Tree::add_dir(uint64_t parent, const std::string& name, struct timespec mtime, bool listed) {
  Inode n;
  n.dir = true;
  n.mtime = mtime;
  return add(parent, name, std::move(n), listed);
}

uint64_t Tree::add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build, uint64_t size,
                        bool listed) {
  Inode n;
  n.mtime = mtime;
  n.build = std::move(build);
  n.size = size;
  ++files_;
  return add(parent, name, std::move(n), listed);
}

uint64_t Tree::add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build, Sizer sizer,
                        bool listed) {
  const uint64_t ino = add_file(parent, name, mtime, std::move(build), Inode::kUnknown, listed);
  nodes_[ino - 1].sizer = std::move(sizer);
  return ino;
}

uint64_t Tree::add_link(uint64_t parent, const std::string& name, struct timespec mtime, std::string target) {
  Inode n;
  n.mtime = mtime;
  n.link = std::move(target);
  return add(parent, name, std::move(n), true);
}

const Inode* Tree::find(const Inode& dir, std::string_view name) const {
  auto it = dir.by_name.find(std::string(name));
  return it == dir.by_name.end() ? nullptr : &nodes_[it->second - 1];
}

uint64_t Tree::add_live_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build) {
  const uint64_t ino = add_file(parent, name, mtime, std::move(build));
  nodes_[ino - 1].live = true;
  return ino;
}

const Inode* Tree::make_lazy(const Inode& dir, std::string_view name) const {
  // Lazily made entries are appended, never changed: the tree stays logically const.
  const uint64_t ino = dir.lazy->make(const_cast<Tree&>(*this), dir.ino, name);
  return ino ? &nodes_[ino - 1] : nullptr;
}

const Inode* Tree::lookup(uint64_t parent, std::string_view name) const {
  const Inode* p = get(parent);
  if (!p || !p->dir) return nullptr;
  if (name == ".") return p;
  if (name == "..") return get(p->parent);
  if (t_appending == this) {
    if (const Inode* n = find(*p, name)) return n;
    return p->lazy ? make_lazy(*p, name) : nullptr;
  }
  {
    std::shared_lock lock(mu_);
    if (const Inode* n = find(*p, name)) return n;
    if (!p->lazy) return nullptr;
  }
  std::unique_lock lock(mu_);
  Appending mark(this);
  if (const Inode* n = find(*p, name)) return n;  // made by another thread meanwhile
  return make_lazy(*p, name);
}

const Inode* Tree::listed_child(const Inode& dir, uint64_t k) const {
  {
    Reading lock(*this);
    if (k < dir.children.size()) return &nodes_[dir.children[k] - 1];
    if (!dir.lazy || k - dir.children.size() >= dir.lazy->listed()) return nullptr;
  }
  const std::string name = dir.lazy->listed_name(k - dir.children.size());
  const Inode* n = lookup(dir.ino, name);
  if (!n) throw Error("view: listed entry '" + name + "' cannot be made", EIO);
  return n;
}

}  // namespace zm::view
