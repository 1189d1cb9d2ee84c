#pragma once
// Walking and reading a View in tests, the way a reader of the mount would.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "zeromount/view/view.h"

namespace zm::test {

// The entry at a mount-relative path ("/a/b"), or nullptr when there is none.
inline const view::Inode* find(const view::View& v, const std::string& path) {
  const view::Inode* n = v.tree().get(view::Tree::kRoot);
  for (size_t a = 1; n && a < path.size();) {
    size_t b = path.find('/', a);
    if (b == std::string::npos) b = path.size();
    n = v.lookup(n->ino, path.substr(a, b - a));
    a = b + 1;
  }
  return n;
}

// The same, for paths that must exist.
inline const view::Inode& at(const view::View& v, const std::string& path) {
  const view::Inode* n = find(v, path);
  if (!n) throw std::runtime_error("no " + path);
  return *n;
}

// A folder's names as a listing shows them, after "." and "..".
inline std::vector<std::string> listing(const view::View& v, const view::Inode& dir) {
  std::vector<std::string> names;
  for (auto e = v.dir_entry(dir, 2); e; e = v.dir_entry(dir, e->next)) names.emplace_back(e->name);
  return names;
}

// A file's whole content, read through an OpenFile.
inline std::string content_of(const view::View& v, const view::Inode& n) {
  const auto c = v.open(n, O_RDONLY);
  std::string s(c.size(), '\0');
  EXPECT_EQ(c.read(0, s.data(), s.size()), s.size());
  return s;
}

}  // namespace zm::test
