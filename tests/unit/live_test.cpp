// A live checkpoint folder (docs/SEMANTICS.md, "A live checkpoint folder"): tags saved after the
// mount appear once they index, `latest` follows the source, names already handed out keep their
// meaning. Each case compares the view with the bytes on disk, never with the view itself.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/shard_names.h"

namespace zm {
namespace {

namespace fs = std::filesystem;
using test::at;
using test::content_of;
using test::find;

const std::string kFixture = test::kFixtures + "/z2_ws2_fp32_pg2/checkpoint";
constexpr const char* kTag = "global_step3";

struct LiveFolder {
  std::string src = test::temp_dir() + "/ckpt";
  LiveFolder() { fs::copy(kFixture, src, fs::copy_options::recursive); }
  // A save of `tag`: the fixture's shards under a new tag folder, made elsewhere and renamed in.
  void save(const std::string& tag, const std::vector<std::string>& only = {}) const {
    const std::string tmp = test::temp_dir() + "/" + tag;
    fs::create_directories(tmp);
    for (const auto& e : fs::directory_iterator(src + "/" + kTag))
      if (only.empty() || std::find(only.begin(), only.end(), e.path().filename()) != only.end())
        fs::copy(e.path(), tmp + "/" + e.path().filename().string());
    if (fs::exists(src + "/" + tag)) {
      for (const auto& e : fs::directory_iterator(tmp))
        fs::rename(e.path(), src + "/" + tag + "/" + e.path().filename().string());
    } else {
      fs::rename(tmp, src + "/" + tag);
    }
  }
  std::unique_ptr<view::View> mount(double rescan = 1e-9) const {
    view::ViewOptions o;
    o.rescan_seconds = rescan;  // every miss rescans: no sleeping in tests
    return view::View::load(src, o);
  }
};

std::string rank_file(int r) {
  return ds::optim_states_name("", r, 0);
}

TEST(LiveFolder, TagSavedAfterTheMountAppearsWithEveryMadeUpFolder) {
  LiveFolder f;
  auto v = f.mount();
  const uint64_t layouts_ino = at(*v, "/layouts/zero2-dp2-fp32").ino;  // made before the save
  const uint64_t old_universal = at(*v, std::string("/") + kTag + "_universal").ino;
  EXPECT_EQ(find(*v, "/global_step5"), nullptr);
  f.save("global_step5");
  ASSERT_NE(find(*v, "/global_step5"), nullptr) << "a lookup of the new tag rescans";
  for (const char* p : {"/global_step5_universal/zero/optimizer_state.pt", "/global_step5_params/summary",
                        "/global_step5_fp32/model.safetensors", "/layouts/zero2-dp2-fp32/global_step5",
                        "/layouts/zero3-dp4-fp32/global_step5", "/layouts/zero3-dp4-fp32/global_step3"})
    EXPECT_NE(find(*v, p), nullptr) << p;
  // The new tag's real files are the source's bytes; its universal files equal the old tag's,
  // whose shards are the same bytes.
  const std::string shard = "/global_step5/" + rank_file(1);
  EXPECT_EQ(content_of(*v, at(*v, shard)), test::read_file(f.src + shard));
  const std::string param = "/zero/fc1.weight/exp_avg.pt";
  EXPECT_EQ(content_of(*v, at(*v, "/global_step5_universal" + param)),
            content_of(*v, at(*v, std::string("/") + kTag + "_universal" + param)));
  // Names handed out before keep their inodes.
  EXPECT_EQ(at(*v, "/layouts/zero2-dp2-fp32").ino, layouts_ino);
  EXPECT_EQ(at(*v, std::string("/") + kTag + "_universal").ino, old_universal);
  // A listing of the root shows the new tag once, after the old names.
  std::vector<std::string> names;
  const view::Inode& root = *v->tree().get(view::Tree::kRoot);
  for (auto e = v->dir_entry(root, 2); e; e = v->dir_entry(root, e->next)) names.emplace_back(e->name);
  EXPECT_EQ(std::count(names.begin(), names.end(), "global_step5"), 1);
  EXPECT_LT(std::find(names.begin(), names.end(), "latest"), std::find(names.begin(), names.end(), "global_step5"));
}

TEST(LiveFolder, LatestFollowsTheSourceOnlyToServedTags) {
  LiveFolder f;
  auto v = f.mount();
  EXPECT_EQ(content_of(*v, at(*v, "/latest")), test::read_file(f.src + "/latest"));
  f.save("global_step5");
  test::write_file(f.src + "/latest", "global_step5");
  EXPECT_EQ(content_of(*v, at(*v, "/latest")), "global_step5") << "reading latest indexes the tag it names";
  EXPECT_EQ(content_of(*v, at(*v, "/latest_universal")), "global_step5_universal");
  EXPECT_EQ(content_of(*v, at(*v, "/layouts/zero2-dp2-fp32/latest")), "global_step5");
  EXPECT_EQ(v->attr(at(*v, "/latest")).st_size, 12);
  // A latest that names a tag the view cannot serve (still being written) keeps the last good text.
  test::write_file(f.src + "/latest", "global_step9");
  EXPECT_EQ(content_of(*v, at(*v, "/latest")), "global_step5");
  fs::remove(f.src + "/latest");
  EXPECT_EQ(content_of(*v, at(*v, "/latest")), "global_step5");
}

TEST(LiveFolder, SaveInProgressIsServedOnceComplete) {
  LiveFolder f;
  auto v = f.mount();
  f.save("global_step7", {"mp_rank_00_model_states.pt", rank_file(0)});  // rank 1 not written yet
  // A tag that does not index yet shows its real files only, and its folder may still gain files.
  const view::Inode& partial = at(*v, "/global_step7");
  EXPECT_FALSE(v->listing_cached(partial));
  EXPECT_EQ(find(*v, "/global_step7/" + rank_file(1)), nullptr);
  EXPECT_EQ(find(*v, "/global_step7_universal"), nullptr);
  EXPECT_NE(content_of(*v, at(*v, "/.zeromount/errors")).find("global_step7: "), std::string::npos);
  f.save("global_step7", {rank_file(1)});
  ASSERT_NE(find(*v, "/global_step7_universal/zero/optimizer_state.pt"), nullptr);
  EXPECT_NE(find(*v, "/global_step7/" + rank_file(1)), nullptr);
  EXPECT_EQ(content_of(*v, at(*v, "/.zeromount/errors")), "");
}

TEST(LiveFolder, TagRefusedAtMountIsServedWhenItsMissingRankArrives) {
  LiveFolder f;
  const std::string missing = f.src + "/" + kTag + "/" + rank_file(1), aside = test::temp_dir() + "/r1";
  fs::rename(missing, aside);
  auto v = f.mount();
  EXPECT_EQ(find(*v, std::string("/") + kTag + "_universal"), nullptr);
  const uint64_t real = at(*v, std::string("/") + kTag).ino;
  EXPECT_FALSE(v->listing_cached(*v->tree().get(real))) << "its folder may still gain files";
  fs::rename(aside, missing);
  ASSERT_NE(find(*v, std::string("/") + kTag + "_universal/zero/optimizer_state.pt"), nullptr);
  EXPECT_EQ(at(*v, std::string("/") + kTag).ino, real) << "the real folder keeps its inode";
  EXPECT_EQ(content_of(*v, at(*v, std::string("/") + kTag + "/" + rank_file(1))), test::read_file(missing));
  EXPECT_TRUE(v->listing_cached(at(*v, std::string("/") + kTag)));
}

// DeepSpeed reads `latest` with fd.read().strip(): the mount and `inspect` name the same tag.
TEST(LiveFolder, LatestNamesTheTagDeepSpeedWouldRead) {
  EXPECT_EQ(ds::latest_tag("global_step5"), "global_step5");
  EXPECT_EQ(ds::latest_tag(" \tglobal_step5\r\n"), "global_step5");
  EXPECT_EQ(ds::latest_tag("\n"), "");
  LiveFolder f;
  test::write_file(f.src + "/latest", std::string(ds::kLatestMaxBytes + 1, 'x'));
  EXPECT_EQ(ds::read_latest(f.src), std::nullopt) << "not DeepSpeed's: larger than any tag name";
  test::write_file(f.src + "/latest", std::string(kTag) + "\n");
  EXPECT_EQ(ds::scan_checkpoint(f.src).latest, kTag);
}

TEST(LiveFolder, NetworkSourceRescansOffTheRequestPath) {
  // The rescan and the read of `latest` run on the View's rescan thread (issue 40); a source that
  // answers does within the moment a request waits, so what it finds is seen as on a local disk
  // (or, on a machine too busy for that moment, by one of the next looks).
  LiveFolder f;
  view::ViewOptions o;
  o.rescan_seconds = 1e-9;
  o.network_source = true;
  auto v = view::View::load(f.src, o);
  v->start_serving();
  EXPECT_EQ(content_of(*v, at(*v, "/latest")), test::read_file(f.src + "/latest"));
  f.save("global_step5");
  test::write_file(f.src + "/latest", "global_step5");
  const auto eventually = [](const std::function<bool()>& seen) {
    for (int k = 0; k < 1000; ++k, std::this_thread::sleep_for(std::chrono::milliseconds(10)))
      if (seen()) return true;
    return false;
  };
  EXPECT_TRUE(eventually([&] { return find(*v, "/global_step5_universal") != nullptr; }));
  EXPECT_TRUE(eventually([&] { return content_of(*v, at(*v, "/latest")) == "global_step5"; }));
  EXPECT_EQ(content_of(*v, at(*v, "/global_step5/" + rank_file(1))),
            test::read_file(f.src + "/global_step5/" + rank_file(1)));
}

TEST(LiveFolder, RescanZeroServesTheMountTimeTags) {
  LiveFolder f;
  auto v = f.mount(0);
  f.save("global_step5");
  EXPECT_EQ(find(*v, "/global_step5"), nullptr);
  const view::Inode& root = *v->tree().get(view::Tree::kRoot);
  EXPECT_TRUE(v->listing_cached(root));
  EXPECT_EQ(v->negative_seconds(root), v->cache_seconds());
}

TEST(LiveFolder, KernelCachePolicy) {
  LiveFolder f;
  auto v = f.mount(2.5);
  const view::Inode& root = *v->tree().get(view::Tree::kRoot);
  EXPECT_EQ(v->negative_seconds(root), 2.5) << "a new tag shows within one rescan period";
  EXPECT_FALSE(v->listing_cached(root));
  const view::Inode& tag = at(*v, std::string("/") + kTag);
  EXPECT_EQ(v->negative_seconds(tag), v->cache_seconds()) << "a served tag's folder never changes";
  EXPECT_EQ(v->attr_seconds(at(*v, "/latest")), 0.0);
  EXPECT_TRUE(v->direct_io(at(*v, "/latest")));
  const view::Inode& shard = at(*v, std::string("/") + kTag + "/" + rank_file(0));
  EXPECT_EQ(v->attr_seconds(shard), v->cache_seconds());
  EXPECT_FALSE(v->direct_io(shard));
}

TEST(LiveFolder, StatsCountWhatEachReaderTookFromTheShards) {
  LiveFolder f;
  auto v = f.mount();
  const view::Inode& n = at(*v, std::string("/") + kTag + "_universal/zero/fc1.weight/fp32.pt");
  const auto h = v->open(n, O_RDONLY, view::Caller{4242, 1000, 1000, {}});
  std::string buf(h.size(), '\0');
  h.read(0, buf.data(), buf.size());
  const std::string stats = content_of(*v, at(*v, "/.zeromount/stats"));
  // fc1.weight is 12 x 30 fp32: 1440 bytes of tensor data from the shards, the rest inline.
  EXPECT_NE(stats.find("pid 4242 bytes 1440\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("bytes_from_shards 1440\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("tags_served 1\n"), std::string::npos) << stats;
  // issue 20: on an allow_other mount, another user does not see whose processes read what.
  const auto as = [&](uid_t uid) {
    const view::Caller who{1, uid, uid, {}};
    const auto o = v->open(at(*v, "/.zeromount/stats"), O_RDONLY, who);
    std::string s(o.size(), '\0');
    o.read(0, s.data(), s.size());
    return s;
  };
  EXPECT_NE(as(1000).find("pid 4242 bytes 1440\n"), std::string::npos);
  EXPECT_EQ(as(1001).find("pid 4242"), std::string::npos);
  EXPECT_NE(as(1001).find("bytes_from_shards 1440\n"), std::string::npos);
}

// issue 20: .zeromount/errors shows a reader only the lines about what that reader may read, and
// names files by their path in the mount, never by where SRC is.
TEST(LiveFolder, ErrorsShowEachReaderWhatItMayRead) {
  LiveFolder f;
  for (const char* tag : {"global_step5", "global_step6"}) {
    f.save(tag, {"mp_rank_00_model_states.pt", rank_file(0)});  // rank 1 missing: refused
    fs::permissions(f.src + "/" + tag, std::string(tag) == "global_step5" ? fs::perms(0700) : fs::perms(0755));
  }
  auto v = f.mount();
  const auto as = [&](uid_t uid) {
    const auto o = v->open(at(*v, "/.zeromount/errors"), O_RDONLY, view::Caller{1, uid, uid, {}});
    std::string s(o.size(), '\0');
    o.read(0, s.data(), s.size());
    return s;
  };
  const std::string all = as(0), other = as(4242);  // root, and a user who owns nothing here
  EXPECT_NE(all.find("global_step5: "), std::string::npos) << all;
  EXPECT_NE(all.find("global_step6: "), std::string::npos) << all;
  EXPECT_EQ(other.find("global_step5"), std::string::npos) << "a 0700 tag folder: " << other;
  EXPECT_EQ(other.rfind("global_step6: global_step6/", 0), 0u) << other;
  EXPECT_EQ(all.find(f.src), std::string::npos) << "no absolute source path: " << all;
}

// Tags appear while readers list, look up and read: run under ThreadSanitizer in CI.
TEST(LiveFolderConcurrency, TagsAppearWhileEightThreadsRead) {
  LiveFolder f;
  auto v = f.mount();
  const std::string param = "_universal/zero/fc1.weight/exp_avg.pt";
  const std::string want = content_of(*v, at(*v, std::string("/") + kTag + param));
  std::atomic<bool> done{false};
  std::atomic<size_t> bad{0}, reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 8; ++t)
    readers.emplace_back([&, t] {
      for (unsigned k = 0; !done; ++k) {
        const std::string tag = "global_step" + std::to_string(5 + (k + t) % 4);
        if (const view::Inode* n = find(*v, "/" + tag + param)) bad += content_of(*v, *n) != want;
        const view::Inode& root = *v->tree().get(view::Tree::kRoot);
        for (auto e = v->dir_entry(root, 0); e; e = v->dir_entry(root, e->next)) {
        }
        bad += content_of(*v, at(*v, "/latest")).rfind("global_step", 0) != 0;
        content_of(*v, at(*v, "/.zeromount/stats"));
        find(*v, "/layouts/zero3-dp" + std::to_string(1 + k % 8) + "-fp32/" + tag);
        ++reads;
      }
    });
  for (int s = 5; s < 9; ++s) {
    f.save("global_step" + std::to_string(s));
    test::write_file(f.src + "/latest", "global_step" + std::to_string(s));
    for (int tries = 0; tries < 2000 && !find(*v, "/global_step" + std::to_string(s) + "_universal"); ++tries)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  done = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(reads, 8u);
  for (int s = 5; s < 9; ++s) EXPECT_EQ(content_of(*v, at(*v, "/global_step" + std::to_string(s) + param)), want) << s;
  EXPECT_EQ(content_of(*v, at(*v, "/latest")), "global_step8");
}

// A keep-last-N run: tags saved and deleted while readers list the folder and look up layout
// targets, so rescans run during listings (issue 31; ThreadSanitizer in CI). Every target made
// resolves, and is made of tags that are still there.
TEST(LiveFolderConcurrency, RescansDuringListingsWhileTagsComeAndGo) {
  LiveFolder f;
  auto v = f.mount();
  std::atomic<bool> done{false};
  std::atomic<size_t> missing{0}, lists{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&, t] {
      for (unsigned k = 0; !done; ++k) {
        const view::Inode& root = *v->tree().get(view::Tree::kRoot);
        for (auto e = v->dir_entry(root, 0); e; e = v->dir_entry(root, e->next)) {
        }
        const std::string target = "/layouts/zero2-dp" + std::to_string(2 + (k * 4 + t) % 60) + "-fp32";
        missing += find(*v, target) == nullptr;
        ++lists;
      }
    });
  std::string error;
  try {
    for (int s = 5; s < 12; ++s) {
      f.save("global_step" + std::to_string(s));
      test::write_file(f.src + "/latest", "global_step" + std::to_string(s));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (s > 5) fs::remove_all(f.src + "/global_step" + std::to_string(s - 1));  // keep the last (and the first)
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  done = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(missing, 0u) << "a valid target name was refused while tags came and went";
  EXPECT_GT(lists, 4u);
}

}  // namespace
}  // namespace zm
