// The view without mounting: the made-up universal folder matches DeepSpeed's converter output,
// sizes are exact, partial reads agree with whole reads, and real files pass through unchanged.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/field.h"
#include "zeromount/view/files/param_names.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;
using view::Inode;
using view::View;

std::set<std::string> names(const View& v, const Inode& dir) {
  std::set<std::string> s;
  for (uint64_t c : dir.folder().children) s.insert(v.tree().get(c)->name);
  return s;
}

class ViewOf : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return kFixtures + "/" + GetParam(); }
};

TEST_P(ViewOf, UniversalFolderMatchesDsToUniversal) {
  auto v = View::load(dir() + "/checkpoint");
  const std::string ref = dir() + "/ds_to_universal/global_step3_universal";
  const Inode& zero = at(*v, "/global_step3_universal/zero");
  std::set<std::string> want;
  for (const auto& e : fs::directory_iterator(ref + "/zero")) want.insert(e.path().filename().string());
  EXPECT_EQ(names(*v, zero), want);
  const std::string tmp = temp_dir();
  for (uint64_t c : zero.folder().children) {
    const Inode& p = *v->tree().get(c);
    if (!p.is_dir()) continue;
    std::set<std::string> files = names(*v, p), ref_files;
    for (const auto& e : fs::directory_iterator(ref + "/zero/" + p.name))
      ref_files.insert(e.path().filename().string());
    ref_files.insert("step.pt");  // the stage-3 converter writes none; the stage-1/2 loader needs it
    EXPECT_EQ(files, ref_files) << p.name;
    for (const std::string state : {"fp32", "exp_avg", "exp_avg_sq"}) {
      SCOPED_TRACE(p.name + "/" + state);
      const Inode& f = *v->tree().lookup(p.ino, state + ".pt");
      const std::string bytes = content_of(*v, f);
      EXPECT_EQ(uint64_t(v->attr(f).st_size), bytes.size());
      write_file(tmp + "/x.pt", bytes);
      auto ours = pt::load_pt(tmp + "/x.pt");
      auto theirs = pt::load_pt(ref + "/zero/" + p.name + "/" + state + ".pt");
      const pt::Node* t = ours->root->get("param");
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(ours->root->get("cat_dim")->i, 0);
      const pt::Node* r = theirs->root->kind == pt::Kind::Dict ? theirs->root->get("param") : theirs->root;
      EXPECT_EQ(tensor_bytes(*ours, *t->tensor), tensor_bytes(*theirs, *r->tensor));
      EXPECT_EQ(t->tensor->numel(), r->tensor->numel());
    }
  }
}

TEST_P(ViewOf, OptimizerStateServesEveryStage) {
  auto v = View::load(dir() + "/checkpoint");
  const std::string tmp = temp_dir();
  write_file(tmp + "/o.pt", content_of(*v, at(*v, "/global_step3_universal/zero/optimizer_state.pt")));
  auto f = pt::load_pt(tmp + "/o.pt");
  ds::Field root(f->root, f->path());
  EXPECT_FALSE(root["ds_version"].as_str().empty());  // stage 1/2 loaders assert it
  EXPECT_EQ(root["param_groups"].size(), 2u);         // stage 1/2: top level
  EXPECT_EQ(root["optimizer_state_dict"]["state"].at(0)["step"].as_tensor().numel(), 1u);  // stage 3
  EXPECT_EQ(root["optimizer_state_dict"]["param_groups"].size(), 2u);
  for (const char* k : {"loss_scaler", "dynamic_loss_scale", "overflow"}) EXPECT_TRUE(root.find(k)) << k;
  EXPECT_FALSE(root.find("fp32_flat_groups"));
  EXPECT_FALSE(root.find("base_optimizer_state"));
  EXPECT_LT(f->file.size(), 8000u) << "no flat tensors copied in";
}

TEST_P(ViewOf, ModelStatesUnderBothNames) {
  auto v = View::load(dir() + "/checkpoint");
  const bool z3 = GetParam().rfind("z3", 0) == 0;
  const std::string src = dir() + "/checkpoint/global_step3/" +
                          (z3 ? "zero_pp_rank_0_mp_rank_00_model_states.pt" : "mp_rank_00_model_states.pt");
  EXPECT_EQ(content_of(*v, at(*v, "/global_step3_universal/mp_rank_00_model_states.pt")), read_file(src));
  EXPECT_EQ(content_of(*v, at(*v, "/global_step3_universal/zero_pp_rank_0_mp_rank_00_model_states.pt")),
            read_file(src));
  EXPECT_TRUE(v->tree().lookup(at(*v, "/global_step3_universal").ino, "zero_pp_rank_1_mp_rank_00_model_states.pt"));
  EXPECT_FALSE(v->tree().lookup(at(*v, "/global_step3_universal").ino, "zero_pp_rank_2_mp_rank_00_model_states.pt"));
  EXPECT_EQ(content_of(*v, at(*v, "/latest_universal")), "global_step3_universal");
}

TEST_P(ViewOf, RealFilesPassThroughUnchanged) {
  auto v = View::load(dir() + "/checkpoint");
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir() + "/checkpoint")) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir() + "/checkpoint").string();
    EXPECT_EQ(content_of(*v, at(*v, "/" + rel)), read_file(e.path().string())) << rel;
    ++n;
  }
  EXPECT_GE(n, 4u);
  const std::set<std::string> tag = names(*v, at(*v, "/global_step3")), real = [&] {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(dir() + "/checkpoint/global_step3"))
      s.insert(e.path().filename().string());
    return s;
  }();
  EXPECT_EQ(tag, real) << "real tag folders get no extra names";
}

TEST_P(ViewOf, RandomChunksEqualWholeReads) {
  auto v = View::load(dir() + "/checkpoint");
  std::mt19937 rng(7);
  std::vector<const Inode*> files;
  for (uint64_t i = 1; i <= v->tree().size(); ++i)
    if (!v->tree().get(i)->is_dir()) files.push_back(v->tree().get(i));
  for (const Inode* f : files) {
    const auto c = v->open(*f, O_RDONLY);  // one open: a live file (stats) is one snapshot per open
    std::string whole(c.size(), '\0');
    ASSERT_EQ(c.read(0, whole.data(), whole.size()), whole.size());
    if (!f->is_live()) {
      EXPECT_EQ(whole, content_of(*v, *f)) << v->describe(*f);
    }
    for (int k = 0; k < 20; ++k) {
      const uint64_t off = rng() % (whole.size() + 1), len = 1 + rng() % 3000;
      std::string part(len, '\0');
      const size_t got = c.read(off, part.data(), len);
      part.resize(got);
      EXPECT_EQ(part, whole.substr(off, len)) << v->describe(*f) << " @" << off;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Real, ViewOf, ::testing::ValuesIn(kFixtureNames));

TEST(ViewNames, ParamDirNamesAreEscapedReversibly) {
  EXPECT_EQ(view::param_dir_name("layers.0.weight"), "layers.0.weight");
  EXPECT_EQ(view::param_dir_name("a/b"), "a%2Fb");
  EXPECT_EQ(view::param_dir_name("100%"), "100%") << "DeepSpeed's own folder names: '%' is left alone";
  EXPECT_EQ(view::param_dir_name("summary", {"README", "summary"}), "%73ummary");
  EXPECT_EQ(view::param_dir_name("summary"), "summary");
  EXPECT_EQ(view::param_dir_name("."), "%2E");
  EXPECT_EQ(view::param_dir_name(".."), "%2E%2E");
  const std::string longname(300, 'x');
  EXPECT_LE(view::param_dir_name(longname).size(), 255u);
  EXPECT_NE(view::param_dir_name(longname), view::param_dir_name(longname + "y"));
}

TEST(ViewTag, TagFolderMountedAloneBecomesACheckpoint) {
  auto v = View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint/global_step3");
  EXPECT_EQ(content_of(*v, at(*v, "/latest")), "global_step3");
  EXPECT_NO_THROW(at(*v, "/global_step3/mp_rank_00_model_states.pt"));
  EXPECT_NO_THROW(at(*v, "/global_step3_universal/zero/fc1.weight/fp32.pt"));
}

// Many threads through the shared parts of a View (built-file cache, lazily filled sizes, shard
// identity checks) must see exactly the bytes one thread sees. Run it under ZM_TSAN to check the
// locking.
TEST(ViewConcurrency, SixteenThreadsReadRandomRanges) {
  view::ViewOptions tiny;
  tiny.cache_bytes = 4096;  // constant eviction: the cache's worst case
  auto v = view::View::load(kFixtures + "/z3_ws2_fp32_pg2_sg200/checkpoint", tiny);
  std::vector<const view::Inode*> files;
  std::vector<std::string> whole;
  auto ref = view::View::load(kFixtures + "/z3_ws2_fp32_pg2_sg200/checkpoint");
  for (uint64_t i = 1; i <= ref->tree().size(); ++i)
    if (!ref->tree().get(i)->is_dir() && !ref->tree().get(i)->is_live()) {  // live files change with every read
      files.push_back(v->tree().get(i));
      whole.push_back(content_of(*ref, *ref->tree().get(i)));
    }
  // A fixed number of reads per thread, not a deadline: what is checked is the bytes, and a slow
  // machine (or a sanitizer) must not make the test fail or check less.
  constexpr int kReadsPerThread = 80;
  std::atomic<size_t> reads{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::string buf;
      for (int r = 0; r < kReadsPerThread; ++r) {
        const size_t k = rng() % files.size();
        const uint64_t size = uint64_t(v->attr(*files[k]).st_size);
        const auto c = v->open(*files[k], O_RDONLY);
        const uint64_t off = rng() % (size + 1), len = 1 + rng() % 5000;
        buf.assign(len, '\0');
        buf.resize(c.read(off, buf.data(), len));
        if (size != whole[k].size() || buf != whole[k].substr(off, len)) ++bad;
        ++reads;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(reads.load(), 16u * kReadsPerThread);
}

}  // namespace
}  // namespace zm::test
