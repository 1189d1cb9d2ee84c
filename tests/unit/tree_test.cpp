// The tree's lazily made folders: a valid name is made once, on first lookup or listing, keeps its
// inode, and is listed only if the folder lists it; concurrent lookups agree.
#include <gtest/gtest.h>

#include <charconv>
#include <thread>

#include "zeromount/view/tree.h"

namespace zm::test {
namespace {

using view::Tree;

// "n<k>" exists for k < 1000 (no leading zeros); a listing shows n0..n2.
class Numbers : public view::LazyDir {
 public:
  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    if (name.size() < 2 || name[0] != 'n' || (name[1] == '0' && name.size() > 2)) return 0;
    unsigned k = 0;
    auto [end, ec] = std::from_chars(name.data() + 1, name.data() + name.size(), k);
    if (ec != std::errc() || end != name.data() + name.size() || k >= 1000) return 0;
    ++made;
    const uint64_t d = tree.add_dir(dir, std::string(name), {}, false);
    tree.add_file(
        d, "value", {}, [] { return pt::VirtualFile(); }, 0);
    return d;
  }
  uint64_t listed() const override { return 3; }
  std::string listed_name(uint64_t k) const override { return "n" + std::to_string(k); }
  mutable std::atomic<int> made{0};
};

TEST(LazyDir, ValidNamesAreMadeOnceAndKeepTheirInode) {
  Tree t({});
  const uint64_t d = t.add_dir(Tree::kRoot, "numbers", {});
  t.add_file(
      d, "README", {}, [] { return pt::VirtualFile(); }, 0);
  auto lazy = std::make_shared<Numbers>();
  t.set_lazy(d, lazy);
  EXPECT_EQ(t.lookup(d, "n1000"), nullptr);
  EXPECT_EQ(t.lookup(d, "n01"), nullptr) << "one thing, one name";
  EXPECT_EQ(t.lookup(d, "x"), nullptr);
  const view::Inode* a = t.lookup(d, "n999");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(t.lookup(d, "n999"), a);
  EXPECT_NE(t.lookup(a->ino, "value"), nullptr);
  EXPECT_EQ(lazy->made.load(), 1);
  // Listing: the eager README, then n0, n1, n2; n999 is found by name but not listed.
  std::vector<std::string> names;
  for (uint64_t k = 0; const view::Inode* n = t.listed_child(*t.get(d), k); ++k) names.push_back(n->name);
  EXPECT_EQ(names, (std::vector<std::string>{"README", "n0", "n1", "n2"}));
  EXPECT_EQ(lazy->made.load(), 4);
  EXPECT_EQ(t.lookup(d, "n1"), t.listed_child(*t.get(d), 2));
}

TEST(LazyDir, ConcurrentLookupsAgree) {
  Tree t({});
  const uint64_t d = t.add_dir(Tree::kRoot, "numbers", {});
  auto lazy = std::make_shared<Numbers>();
  t.set_lazy(d, lazy);
  std::vector<std::vector<const view::Inode*>> seen(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 500; ++k) seen[i].push_back(t.lookup(d, "n" + std::to_string((k * 7 + i) % 500)));
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(lazy->made.load(), 500);
  for (int k = 0; k < 500; ++k)
    for (int i = 0; i < 8; ++i) {
      const view::Inode* n = seen[i][size_t(k)];
      ASSERT_NE(n, nullptr);
      EXPECT_EQ(n, t.lookup(d, n->name));
    }
}

// Memory follows what the kernel holds: what a LazyDir made is dropped once the kernel forgot it
// and nothing of it is open, and made again (under a new inode) when it is looked up again.
TEST(LazyDir, ForgottenEntriesAreDroppedAndMadeAgain) {
  Tree t({});
  const uint64_t d = t.add_dir(Tree::kRoot, "numbers", {});
  auto lazy = std::make_shared<Numbers>();
  t.set_lazy(d, lazy);
  const size_t idle = t.size();
  std::vector<uint64_t> made;
  for (int k = 0; k < 500; ++k) {
    const view::Inode* n = t.lookup(d, "n" + std::to_string(k), true);  // as a lookup the kernel is told of
    made.push_back(n->ino);
  }
  EXPECT_EQ(t.size(), idle + 1000) << "a folder and its file per name";
  for (uint64_t ino : made) EXPECT_EQ(t.forget(ino, 1), 2u);
  EXPECT_EQ(t.size(), idle);
  EXPECT_EQ(t.get(made[0]), nullptr);
  const view::Inode* again = t.lookup(d, "n0");
  ASSERT_NE(again, nullptr);
  EXPECT_GT(again->ino, made.back()) << "inode numbers are never reused";
  EXPECT_NE(t.lookup(again->ino, "value"), nullptr);
}

TEST(LazyDir, WhatIsReferencedOrOpenIsKept) {
  Tree t({});
  const uint64_t d = t.add_dir(Tree::kRoot, "numbers", {});
  t.set_lazy(d, std::make_shared<Numbers>());
  const view::Inode* a = t.lookup(d, "n1", true);
  t.lookup(d, "n1", true);
  EXPECT_EQ(t.forget(a->ino, 1), 0u) << "the kernel still holds one reference";
  const view::Inode* value = t.lookup(a->ino, "value");
  value->opens.fetch_add(1);  // an OpenFile of something below it
  EXPECT_EQ(t.forget(a->ino, 1), 0u) << "a file below it is open";
  value->opens.fetch_sub(1);
  EXPECT_EQ(t.get(a->ino), a);
  t.lookup(d, "n1", true);
  EXPECT_EQ(t.forget(a->ino, 1), 2u);
  // Entries a listing made, which the kernel never referred to, go with their folder's forget.
  const view::Inode* dir = t.lookup(Tree::kRoot, "numbers", true);
  for (uint64_t k = 0; t.listed_child(*dir, k); ++k) {
  }
  EXPECT_EQ(t.forget(d, 1), 6u) << "n0, n1, n2 and their files";
  EXPECT_NE(t.get(d), nullptr) << "eager folders stay";
}

}  // namespace
}  // namespace zm::test
