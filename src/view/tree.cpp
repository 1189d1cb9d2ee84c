#include "zeromount/view/tree.h"

#include "zeromount/pt/error.h"

namespace zm::view {

Tree::Tree(struct timespec root_mtime) {
  Inode root;
  root.ino = kRoot;
  root.parent = kRoot;
  root.dir = true;
  root.mtime = root_mtime;
  nodes_.push_back(std::move(root));
}

uint64_t Tree::add(uint64_t parent, const std::string& name, Inode&& n) {
  Inode* p = parent >= 1 && parent <= nodes_.size() ? &nodes_[parent - 1] : nullptr;
  if (!p || !p->dir) throw Error("view: parent of '" + name + "' is not a folder");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.size() > 255)
    throw Error("view: '" + name + "' cannot be a file name");
  if (p->by_name.count(name)) throw Error("view: '" + name + "' exists twice in one folder");
  n.ino = nodes_.size() + 1;
  n.parent = parent;
  n.name = name;
  p->by_name.emplace(name, n.ino);
  p->children.push_back(n.ino);
  nodes_.push_back(std::move(n));
  return nodes_.size();
}

uint64_t Tree::add_dir(uint64_t parent, const std::string& name, struct timespec mtime) {
  Inode n;
  n.dir = true;
  n.mtime = mtime;
  return add(parent, name, std::move(n));
}

uint64_t Tree::add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build, uint64_t size) {
  Inode n;
  n.mtime = mtime;
  n.build = std::move(build);
  n.size = size;
  ++files_;
  return add(parent, name, std::move(n));
}

uint64_t Tree::add_file(uint64_t parent, const std::string& name, struct timespec mtime, Builder build, Sizer sizer) {
  const uint64_t ino = add_file(parent, name, mtime, std::move(build));
  nodes_[ino - 1].sizer = std::move(sizer);
  return ino;
}

const Inode* Tree::lookup(uint64_t parent, std::string_view name) const {
  const Inode* p = get(parent);
  if (!p || !p->dir) return nullptr;
  if (name == ".") return p;
  if (name == "..") return get(p->parent);
  auto it = p->by_name.find(std::string(name));
  return it == p->by_name.end() ? nullptr : get(it->second);
}

}  // namespace zm::view
