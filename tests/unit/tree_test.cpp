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

}  // namespace
}  // namespace zm::test
