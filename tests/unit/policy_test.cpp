// Filesystem policy, decided by the View and tested without FUSE: open flags, directory offsets,
// negative lookups, statfs, the per-open-file handle, and which folders are made up.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/export.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;
using view::Inode;
using view::View;

const std::string kCkpt = kFixtures + "/z2_ws2_fp32_pg2/checkpoint";

int errno_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.errno_value();
  }
  return 0;
}

TEST(Policy, OpenRefusesEveryWayOfWriting) {
  auto v = View::load(kCkpt);
  const Inode& real = at(*v, "/global_step3/mp_rank_00_model_states.pt");
  const Inode& made = at(*v, "/global_step3_universal/zero/fc1.weight/fp32.pt");
  for (const Inode* n : {&real, &made}) {
    EXPECT_EQ(errno_of([&] { v->open(*n, O_WRONLY); }), EROFS);
    EXPECT_EQ(errno_of([&] { v->open(*n, O_RDWR); }), EROFS);
    EXPECT_EQ(errno_of([&] { v->open(*n, O_RDONLY | O_TRUNC); }), EROFS);
    EXPECT_EQ(errno_of([&] { v->open(*n, O_RDONLY | O_NOATIME | O_NONBLOCK); }), 0);
  }
  EXPECT_EQ(errno_of([&] { v->open(at(*v, "/global_step3"), O_RDONLY); }), EISDIR);
  EXPECT_EQ(errno_of([&] { v->open_dir(real); }), ENOTDIR);
  EXPECT_EQ(errno_of([&] { v->open_dir(at(*v, "/global_step3_universal")); }), 0);
  EXPECT_EQ(View::kChangeErrno, EROFS);
}

TEST(Policy, AnOpenFileReadsTheRealBytes) {
  auto v = View::load(kCkpt);
  const std::string path = kCkpt + "/global_step3/mp_rank_00_model_states.pt";
  const auto f = v->open(at(*v, "/global_step3/mp_rank_00_model_states.pt"), O_RDONLY);
  std::string got(f.size() + 100, '\0');
  got.resize(f.read(0, got.data(), got.size()));
  EXPECT_EQ(got, read_file(path)) << "short read only at the end, and exact bytes";
  char c;
  EXPECT_EQ(f.read(f.size(), &c, 1), 0u);
  EXPECT_EQ(f.read(f.size() + 5, &c, 1), 0u);
}

TEST(Policy, DirectoryOffsetsResumeWhereTheyStopped) {
  auto v = View::load(kCkpt);
  const Inode& dir = at(*v, "/global_step3_universal/zero");
  std::vector<std::string> all;
  for (auto e = v->dir_entry(dir, 0); e; e = v->dir_entry(dir, e->next)) all.emplace_back(e->name);
  ASSERT_GE(all.size(), 3u);
  EXPECT_EQ(all[0], ".");
  EXPECT_EQ(all[1], "..");
  EXPECT_EQ(v->dir_entry(dir, 0)->node, &dir);
  EXPECT_EQ(v->dir_entry(dir, 1)->node, &at(*v, "/global_step3_universal"));
  EXPECT_EQ(all.size(), dir.folder().children.size() + 2);
  // Resuming at any offset gives the rest of the same listing.
  for (uint64_t off = 0; off < all.size(); ++off) EXPECT_EQ(v->dir_entry(dir, off)->name, all[off]);
  EXPECT_FALSE(v->dir_entry(dir, all.size()));
  EXPECT_FALSE(v->dir_entry(dir, all.size() + 1000));
  EXPECT_EQ(std::set<std::string>(all.begin() + 2, all.end()).size(), all.size() - 2) << "no name twice";
  // The root's ".." is the root itself.
  EXPECT_EQ(v->dir_entry(v->inode(view::Tree::kRoot), 1)->node, &v->inode(view::Tree::kRoot));
  EXPECT_EQ(errno_of([&] { v->dir_entry(at(*v, "/latest"), 0); }), ENOTDIR);
}

TEST(Policy, NegativeLookupsAndUnknownInodes) {
  auto v = View::load(kCkpt);
  EXPECT_EQ(v->lookup(view::Tree::kRoot, "no_such_tag"), nullptr);
  EXPECT_EQ(v->lookup(at(*v, "/global_step3").ino, "global_step3_universal"), nullptr)
      << "real tag folders get no extra names";
  EXPECT_EQ(v->lookup(at(*v, "/latest").ino, "x"), nullptr) << "a file has no children";
  EXPECT_EQ(errno_of([&] { v->inode(0); }), ENOENT);
  EXPECT_EQ(errno_of([&] { v->inode(v->tree().size() + 1); }), ENOENT);
  EXPECT_GT(v->cache_seconds(), 86400.0) << "names never change while mounted";
}

TEST(Policy, AttributesAreReadOnlyAndExact) {
  auto v = View::load(kCkpt);
  const struct stat d = v->attr(at(*v, "/global_step3_universal"));
  EXPECT_TRUE(S_ISDIR(d.st_mode));
  EXPECT_EQ(d.st_mode & 0777, 0555u);
  const Inode& f = at(*v, "/global_step3_universal/zero/fc1.weight/exp_avg.pt");
  const struct stat s = v->attr(f);
  EXPECT_TRUE(S_ISREG(s.st_mode));
  EXPECT_EQ(s.st_mode & 0777, 0444u);
  EXPECT_EQ(uint64_t(s.st_size), v->open(f, O_RDONLY).size());
  EXPECT_EQ(s.st_blksize, blksize_t(view::kRequestBytes));
}

// A listing sends attributes only where they cost nothing: listing a faked layout's 8192 rank
// files must not build them (issue 14: 15 s for the 70B source before). ZeRO-3 rank files are
// sized without a build (issue 19), so their attributes go with the listing; ZeRO-1/2 ones not.
TEST(Policy, ListingsSendAttributesOnlyWhereNothingMustBeBuilt) {
  auto v = View::load(kCkpt);
  const Inode& dir = at(*v, "/layouts/zero2-dp64-fp32/global_step3");
  size_t files = 0;
  for (auto e = v->dir_entry(dir, 2); e; e = v->dir_entry(dir, e->next)) {
    EXPECT_FALSE(v->attr_ready(*e->node)) << e->name << ": its size needs a build";
    ++files;
  }
  EXPECT_EQ(files, 65u);
  const Inode& sized = at(*v, "/layouts/zero3-dp64-fp32/global_step3");
  for (auto e = v->dir_entry(sized, 2); e; e = v->dir_entry(sized, e->next))
    EXPECT_TRUE(v->attr_ready(*e->node)) << e->name << ": sized without a build";
  const Inode& rank = at(*v, "/layouts/zero2-dp64-fp32/global_step3/zero_pp_rank_7_mp_rank_00_optim_states.pt");
  v->attr(rank);
  EXPECT_TRUE(v->attr_ready(rank)) << "built once, its size is known";
  EXPECT_TRUE(v->attr_ready(at(*v, "/global_step3/mp_rank_00_model_states.pt"))) << "real files: size at mount";
  EXPECT_TRUE(v->attr_ready(at(*v, "/global_step3_universal"))) << "folders";
  EXPECT_TRUE(v->attr_ready(at(*v, "/latest")));
}

TEST(Policy, StatfsReportsTheRealBytesAndNoInodeUse) {
  auto v = View::load(kCkpt);
  uint64_t top = 0, real = 0;
  for (const auto& e : fs::recursive_directory_iterator(kCkpt))
    if (e.is_regular_file()) (e.path().parent_path() == kCkpt ? top : real) += e.file_size();
  real += top;
  EXPECT_EQ(v->statfs().blocks, (top + 4095) / 4096) << "folders below are not listed yet: mounting reads no more";
  at(*v, "/global_step3/mp_rank_00_model_states.pt");  // fills the tag folder
  const view::FsStats s = v->statfs();
  EXPECT_EQ(s.blocks, (real + s.block_size - 1) / s.block_size);
  EXPECT_EQ(s.files, 0u) << "df would show 100% of inodes used otherwise";
  EXPECT_EQ(s.name_max, 255u);
}

TEST(Policy, MadeUpFoldersAreMarkedByTheirProviderNotByTheirName) {
  const std::string src = temp_dir() + "/ckpt";
  fs::copy(kCkpt, src, fs::copy_options::recursive);
  fs::create_directory(src + "/notes_params");
  write_file(src + "/notes_params/todo.txt", "a real folder whose name ends like a made-up one\n");
  fs::create_directory(src + "/global_step3_fp32");  // a real folder wins over the made-up one
  write_file(src + "/global_step3_fp32/mine.txt", "mine\n");
  auto v = View::load(src);
  std::set<std::string> kinds;
  for (const auto& p : view::providers()) kinds.emplace(p->kind());
  for (uint64_t c : v->inode(view::Tree::kRoot).folder().children) {
    const Inode& n = v->inode(c);
    if (n.made_by) {
      EXPECT_TRUE(kinds.count(std::string(n.made_by->kind()))) << n.name;
    }
  }
  EXPECT_EQ(at(*v, "/notes_params").made_by, nullptr);
  EXPECT_EQ(at(*v, "/global_step3_fp32").made_by, nullptr);
  EXPECT_NO_THROW(at(*v, "/global_step3_fp32/mine.txt"));
  EXPECT_EQ(at(*v, "/global_step3_params").made_by->kind(), "params");
  EXPECT_EQ(at(*v, "/global_step3_universal").made_by->kind(), "universal");
  EXPECT_EQ(at(*v, "/latest_universal").made_by->kind(), "universal");
  EXPECT_EQ(at(*v, "/global_step3").made_by, nullptr);

  // export takes what the tree marks, never a name ending.
  const std::string out = temp_dir() + "/out";
  view::ExportOptions o;
  o.what = "all";
  view::export_view(*v, out, o);
  EXPECT_TRUE(fs::exists(out + "/global_step3_params/summary"));
  EXPECT_TRUE(fs::exists(out + "/global_step3_universal/zero/optimizer_state.pt"));
  EXPECT_FALSE(fs::exists(out + "/notes_params"));
  EXPECT_FALSE(fs::exists(out + "/global_step3_fp32")) << "a real folder is not exported";
  o.what = "nonsense";
  EXPECT_EQ(errno_of([&] { view::export_view(*v, temp_dir() + "/out2", o); }), EINVAL);
}

}  // namespace
}  // namespace zm::test
