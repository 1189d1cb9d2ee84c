// Deep folders (issue 27 item 9): a folder is looked into through its descriptor, found from its
// parent's, so filling it costs the same at any depth; what is kept open stays bounded.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/source_dir.h"

namespace zm {
namespace {

namespace fs = std::filesystem;

// root/name/name/... (`depth` folders), made and removed through descriptors: it may be deeper
// than a path can name. A file `bottom` holding "the bottom\n" lies in the last one.
struct Chain {
  std::string root, name;
  int depth;
  Chain(int depth_, std::string name_) : root(test::temp_dir()), name(std::move(name_)), depth(depth_) {
    int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY);
    for (int k = 0; k < depth; ++k) {
      EXPECT_EQ(::mkdirat(fd, name.c_str(), 0755), 0);
      const int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY);
      ::close(fd);
      fd = next;
    }
    const int f = ::openat(fd, "bottom", O_WRONLY | O_CREAT, 0644);
    EXPECT_EQ(::write(f, "the bottom\n", 11), 11);
    ::close(f);
    ::close(fd);
  }
  ~Chain() {
    std::vector<int> fds{::open(root.c_str(), O_RDONLY | O_DIRECTORY)};
    for (int k = 0; k < depth; ++k) fds.push_back(::openat(fds.back(), name.c_str(), O_RDONLY | O_DIRECTORY));
    ::unlinkat(fds.back(), "bottom", 0);
    for (int k = depth; k > 0; --k) {
      ::close(fds[size_t(k)]);
      ::unlinkat(fds[size_t(k - 1)], name.c_str(), AT_REMOVEDIR);
    }
    ::close(fds[0]);
    ::rmdir(root.c_str());
  }
  // The path of the folder at depth k (0: root).
  std::string path(int k) const {
    std::string p = root;
    for (int i = 0; i < k; ++i) p += "/" + name;
    return p;
  }
};

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(SourceDir, AFolderIsOpenedFromItsParentNotByItsWholePath) {
  // Long names: a few levels are past PATH_MAX, where a path is refused (ENAMETOOLONG) and only a
  // descriptor reaches. Each level opened after its parent is found from the parent's descriptor.
  const Chain c(20, std::string(250, 'n'));
  int past = 0;
  for (int k = 0; k <= c.depth; ++k) {
    const std::string p = c.path(k);
    const ds::Dir d = ds::open_dir(p);
    ASSERT_TRUE(d.ok()) << "depth " << k << " (" << p.size() << " bytes): " << strerror(errno);
    if (p.size() >= PATH_MAX) {
      ++past;
      EXPECT_LT(::open(p.c_str(), O_PATH), 0) << "the kernel refuses the path itself";
    }
  }
  EXPECT_GT(past, 2);
  const ds::Dir bottom = ds::open_dir(c.path(c.depth));
  EXPECT_EQ(bottom.read_file("bottom", 4096), "the bottom\n");
  struct stat st {};
  EXPECT_TRUE(bottom.stat("bottom", st) && S_ISREG(st.st_mode));
}

TEST(SourceDir, AtMostKDirsKeptDescriptorsStayOpen) {
  const std::string root = test::temp_dir();
  for (int k = 0; k < 300; ++k) fs::create_directory(root + "/" + std::to_string(k));
  const size_t before = open_descriptors();
  for (int k = 0; k < 300; ++k) ASSERT_TRUE(ds::open_dir(root + "/" + std::to_string(k)).ok());
  EXPECT_LE(open_descriptors(), before + ds::kDirsKept) << "whatever anyone looks up";
  fs::remove_all(root);
}

TEST(SourceDir, AFolderReplacedAtItsPathIsTheNewOne) {
  const std::string root = test::temp_dir();
  const auto ino = [](const ds::Dir& d) {
    struct stat st {};
    return d.stat(st) ? st.st_ino : 0;
  };
  fs::create_directory(root + "/a");
  ASSERT_TRUE(ds::open_dir(root).ok());
  const auto first = ino(ds::open_dir(root + "/a"));
  // Deleted and made again at once (a keep-last-N cleanup, then a save under the same name).
  fs::remove(root + "/a");
  fs::create_directory(root + "/a");
  struct stat now {};
  ASSERT_EQ(::stat((root + "/a").c_str(), &now), 0);
  EXPECT_NE(first, now.st_ino);
  EXPECT_EQ(ino(ds::open_dir(root + "/a")), now.st_ino);
  // Renamed away and replaced: seen once the folders on the way are looked up whole again.
  fs::rename(root + "/a", root + "/old");
  fs::create_directory(root + "/a");
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ASSERT_EQ(::stat((root + "/a").c_str(), &now), 0);
  EXPECT_EQ(ino(ds::open_dir(root + "/a")), now.st_ino);
  EXPECT_FALSE(ds::open_dir(root + "/gone").ok());
  EXPECT_FALSE(ds::is_folder(root + "/gone"));
  EXPECT_TRUE(ds::is_folder(root + "/old"));
  fs::remove_all(root);
}

// Walks a chain of 1,500 one-letter folders in the view, each level's first lookup filling the
// folder above it, down to the file at the bottom. What a level costs at depth is a benchmark,
// never a timed assertion here: bench/deep.py measures the daemon's CPU per walk.
TEST(Deep, AChainOf1500FoldersIsWalkedToItsBottom) {
  const Chain c(1500, "d");
  view::ViewOptions o;
  auto v = view::View::load(c.root, o);
  const view::Inode* n = v->tree().get(view::Tree::kRoot);
  for (int k = 0; k < c.depth; ++k) {
    n = v->lookup(n->ino, "d");
    ASSERT_NE(n, nullptr) << "depth " << k + 1;
    ASSERT_TRUE(n->is_dir());
  }
  const view::Inode* bottom = v->lookup(n->ino, "bottom");
  ASSERT_NE(bottom, nullptr);
  EXPECT_EQ(test::content_of(*v, *bottom), "the bottom\n");
}

TEST(Deep, AnEntryPastPathMaxIsNotShownAndTheRestIs) {
  const Chain c(20, std::string(250, 'n'));
  test::write_file(c.root + "/beside", "x");
  view::ViewOptions o;
  auto v = view::View::load(c.root, o);
  const view::Inode* n = v->tree().get(view::Tree::kRoot);
  int shown = 0;
  while ((n = v->lookup(n->ino, c.name))) ++shown;
  EXPECT_EQ(size_t(shown), (PATH_MAX - 1 - c.root.size()) / (c.name.size() + 1))
      << "every folder whose path the kernel accepts, and no deeper one";
  EXPECT_NE(test::find(*v, "/beside"), nullptr);
}

// Threads walk one chain at once, each from the top, while one lists every level it reaches: the
// fills, the rescans (every listing may rescan) and ds::open_dir's cache are shared (ThreadSanitizer in CI).
TEST(DeepConcurrency, EightThreadsWalkOneChain) {
  const Chain c(300, "d");
  view::ViewOptions o;
  o.rescan_seconds = 1e-9;
  auto v = view::View::load(c.root, o);
  std::atomic<size_t> bottoms{0};
  std::vector<std::thread> walkers;
  for (int t = 0; t < 8; ++t)
    walkers.emplace_back([&, t] {
      const view::Inode* n = v->tree().get(view::Tree::kRoot);
      for (int k = 0; n && k < c.depth; ++k) {
        if (t == 0)
          for (auto e = v->dir_entry(*n, 0); e; e = v->dir_entry(*n, e->next)) {
          }
        n = v->lookup(n->ino, "d");
      }
      bottoms += n && v->lookup(n->ino, "bottom") != nullptr;
    });
  for (auto& w : walkers) w.join();
  EXPECT_EQ(bottoms, 8u);
}

}  // namespace
}  // namespace zm
