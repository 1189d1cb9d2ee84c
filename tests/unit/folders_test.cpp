// Checkpoint folders at any depth (a Trainer's output_dir holds checkpoint-N/, each a DeepSpeed
// load_dir): every folder that holds tag folders gets SRC's made-up entries beside its tags, found
// when it is first used; a keep-last-N cleanup deletes tags while mounted. Each case compares the
// view with the files on disk, never with the view itself.
#include <gtest/gtest.h>

#include <filesystem>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/pt/error.h"

namespace zm {
namespace {

namespace fs = std::filesystem;
using test::at;
using test::content_of;
using test::find;

const std::string kRun = test::kFixtures + "/hf/gpt2_z2/run";  // the Trainer's output_dir

std::vector<std::string> names(const view::View& v, const std::string& path) {
  std::vector<std::string> out;
  const view::Inode& d = at(v, path);
  for (auto e = v.dir_entry(d, 0); e; e = v.dir_entry(d, e->next))  // from 0, as readdir does: it may rescan
    if (e->name != "." && e->name != "..") out.emplace_back(e->name);
  return out;
}

bool has(const std::vector<std::string>& all, const std::string& name) {
  return std::find(all.begin(), all.end(), name) != all.end();
}

struct Experiments {
  std::string src = test::temp_dir() + "/experiments";
  Experiments() {
    fs::create_directories(src + "/team/run1");
    fs::copy(kRun, src + "/team/run1", fs::copy_options::recursive);
  }
  std::unique_ptr<view::View> mount(double rescan = 1e-9) const {
    view::ViewOptions o;
    o.rescan_seconds = rescan;
    return view::View::load(src, o);
  }
};

TEST(Folders, NestedCheckpointFoldersGetTheMadeUpEntriesOfSRC) {
  Experiments x;
  auto v = x.mount();
  const size_t nodes = v->tree().size();
  EXPECT_LT(nodes, 10u) << "folders below SRC are listed and indexed on first use, not at mount";
  const std::string ck = "/team/run1/checkpoint-2";
  for (const char* made : {"/global_step2_universal/zero/transformer.wte.weight/exp_avg.pt",
                           "/global_step2_params/summary", "/global_step2_fp32/model.safetensors", "/latest_universal",
                           "/layouts/README", "/layouts/zero3-dp4-fp32/global_step2"})
    EXPECT_NE(find(*v, ck + made), nullptr) << made;
  EXPECT_EQ(content_of(*v, at(*v, ck + "/latest_universal")), "global_step2_universal");
  // The real tag folder stays untouched; real files are the source's bytes.
  EXPECT_EQ(names(*v, ck + "/global_step2").size(), 3u);
  EXPECT_EQ(content_of(*v, at(*v, ck + "/trainer_state.json")),
            test::read_file(kRun + "/checkpoint-2/trainer_state.json"));
  // Folders that hold no tags get nothing made up, but a run folder (checkpoint folders below) its
  // report across them.
  EXPECT_EQ(names(*v, "/team"), std::vector<std::string>{"run1"});
  EXPECT_EQ(names(*v, "/team/run1"), (std::vector<std::string>{"checkpoint-2", "checkpoint-4", "report.html"}));
  EXPECT_EQ(find(*v, "/layouts"), nullptr);
  EXPECT_EQ(find(*v, "/team/run1/layouts"), nullptr);
  EXPECT_NE(find(*v, "/.zeromount/stats"), nullptr) << "one status folder, at the root";
  EXPECT_NE(content_of(*v, at(*v, "/.zeromount/stats")).find("tags_served 1\n"), std::string::npos)
      << "only checkpoint-2 has been visited";
}

TEST(Folders, ATargetIsAWholeCheckpointFolder) {
  Experiments x;
  auto v = x.mount();
  const std::string ck = "/team/run1/checkpoint-2", real = kRun + "/checkpoint-2";
  const auto target = names(*v, ck + "/layouts/zero3-dp4-fp32");
  std::vector<std::string> want{"latest", "global_step2"};
  for (const auto& e : fs::directory_iterator(real))
    if (e.is_regular_file() && e.path().filename() != "latest") want.push_back(e.path().filename());
  std::vector<std::string> got = target;
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want) << "every real entry of the folder, no made-up one, no other tag's folders";
  for (const char* f : {"trainer_state.json", "scheduler.pt", "rng_state_1.pth", "training_args.bin", "config.json"})
    EXPECT_EQ(content_of(*v, at(*v, ck + "/layouts/zero3-dp4-fp32/" + f)), test::read_file(real + "/" + f)) << f;
  EXPECT_EQ(content_of(*v, at(*v, ck + "/layouts/zero3-dp4-fp32/latest")), test::read_file(real + "/latest"));
}

TEST(Folders, WeightsFoldersHoldWhatFromPretrainedReads) {
  Experiments x;
  auto v = x.mount();
  const std::string ck = "/team/run1/checkpoint-2", real = kRun + "/checkpoint-2";
  EXPECT_EQ(names(*v, ck + "/global_step2_fp32"),
            (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors"}));
  EXPECT_EQ(content_of(*v, at(*v, ck + "/global_step2_fp32/config.json")), test::read_file(real + "/config.json"));
}

TEST(Folders, ACheckpointFolderSavedAfterTheMountAppears) {
  Experiments x;
  fs::remove_all(x.src + "/team/run1/checkpoint-4");
  auto v = x.mount();
  EXPECT_EQ(names(*v, "/team/run1"), (std::vector<std::string>{"checkpoint-2", "report.html"}));
  fs::copy(kRun + "/checkpoint-4", x.src + "/team/run1/checkpoint-4", fs::copy_options::recursive);
  EXPECT_TRUE(has(names(*v, "/team/run1"), "checkpoint-4")) << "a listing rescans the folder";
  EXPECT_NE(find(*v, "/team/run1/checkpoint-4/global_step4_universal/zero/optimizer_state.pt"), nullptr);
}

TEST(Folders, ABrokenNestedTagIsNamedByItsPathInTheMount) {
  Experiments x;
  const std::string tag = x.src + "/team/run1/checkpoint-2/global_step2";
  fs::remove(tag + "/" + ds::optim_states_name("", 1, 0));
  auto v = x.mount();
  EXPECT_NE(find(*v, "/team/run1/checkpoint-4/global_step4_universal"), nullptr);
  EXPECT_EQ(find(*v, "/team/run1/checkpoint-2/global_step2_universal"), nullptr);
  EXPECT_EQ(names(*v, "/team/run1/checkpoint-2/global_step2").size(), 2u) << "its real files";
  const std::string errors = content_of(*v, at(*v, "/.zeromount/errors"));
  EXPECT_EQ(errors.rfind("team/run1/checkpoint-2/global_step2: ", 0), 0u) << errors;
  EXPECT_NE(errors.find("team/run1/checkpoint-2/latest: names 'global_step2', which is not served"), std::string::npos)
      << errors;
}

// issue 20: a keep-last-N cleanup (DeepSpeed's, the Trainer's save_total_limit) deletes tags.
TEST(Folders, ADeletedTagLeavesStatsAndTheTargetsMadeAfterIt) {
  const std::string src = test::temp_dir() + "/ckpt";
  test::copy_fixture("z2_ws2_fp32_pg2/checkpoint", src);
  fs::copy(src + "/global_step3", src + "/global_step5", fs::copy_options::recursive);
  test::write_file(src + "/latest", "global_step5");
  view::ViewOptions o;
  o.rescan_seconds = 1e-9;
  auto v = view::View::load(src, o);
  const view::Inode& old_file = at(*v, "/global_step3_universal/zero/fc1.weight/fp32.pt");
  fs::remove_all(src + "/global_step3");
  EXPECT_FALSE(has(names(*v, "/"), "nothing")) << "a listing rescans";
  const std::string stats = content_of(*v, at(*v, "/.zeromount/stats"));
  EXPECT_NE(stats.find("tags_served 1\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("tags_deleted 1\n"), std::string::npos) << stats;
  // A routine cleanup is counted, not a line of errors (issue 27: a keep-last-N run grew it forever).
  EXPECT_EQ(content_of(*v, at(*v, "/.zeromount/errors")).find("global_step3"), std::string::npos);
  // A target not looked up before resolves with the tags that remain.
  ASSERT_NE(find(*v, "/layouts/zero3-dp8-fp32"), nullptr);
  EXPECT_EQ(names(*v, "/layouts/zero3-dp8-fp32"), (std::vector<std::string>{"latest", "global_step5"}));
  EXPECT_NE(find(*v, "/layouts/zero3-dp8-fp32/global_step5/zero_pp_rank_7_mp_rank_00_optim_states.pt"), nullptr);
  // Names already shown keep their meaning: their reads fail with ESTALE.
  EXPECT_EQ(at(*v, "/global_step3_universal/zero/fc1.weight/fp32.pt").ino, old_file.ino);
  try {
    content_of(*v, old_file);
    ADD_FAILURE() << "a file built from deleted shards must not be served";
  } catch (const Error& e) {
    EXPECT_EQ(e.errno_value(), ESTALE) << e.what();
  }
}

// issue 20: a target listed before a save lists the new tag after it.
TEST(Folders, ATargetListedBeforeASaveListsTheNewTag) {
  const std::string src = test::temp_dir() + "/ckpt";
  test::copy_fixture("z2_ws2_fp32_pg2/checkpoint", src);
  view::ViewOptions o;
  o.rescan_seconds = 1e-9;
  auto v = view::View::load(src, o);
  EXPECT_EQ(names(*v, "/layouts/zero3-dp4-fp32"), (std::vector<std::string>{"latest", "global_step3"}));
  EXPECT_FALSE(v->listing_cached(at(*v, "/layouts/zero3-dp4-fp32"))) << "it may gain the next save";
  fs::copy(src + "/global_step3", src + "/global_step5", fs::copy_options::recursive);
  EXPECT_TRUE(has(names(*v, "/layouts/zero3-dp4-fp32"), "global_step5"));
}

// issue 20: at mount, a `latest` that names a tag the view cannot serve is not shown as is.
TEST(Folders, LatestNamingATruncatedTagAtMountShowsTheNewestServedTag) {
  const std::string src = test::temp_dir() + "/ckpt";
  test::copy_fixture("z2_ws2_fp32_pg2/checkpoint", src);
  fs::copy(src + "/global_step3", src + "/global_step9", fs::copy_options::recursive);
  fs::remove(src + "/global_step9/" + ds::optim_states_name("", 1, 0));
  test::write_file(src + "/latest", "global_step9");
  auto v = view::View::load(src);
  EXPECT_EQ(content_of(*v, at(*v, "/latest")), "global_step3");
  EXPECT_EQ(content_of(*v, at(*v, "/latest_universal")), "global_step3_universal");
  EXPECT_EQ(content_of(*v, at(*v, "/layouts/zero2-dp2-fp32/latest")), "global_step3");
  EXPECT_NE(content_of(*v, at(*v, "/.zeromount/errors"))
                .find("latest: names 'global_step9', which is not served; showing global_step3"),
            std::string::npos);
}

// issue 19: every distinct target name anyone looks up costs memory only while the kernel holds it.
TEST(Folders, TargetNamesAreForgottenWithTheKernelsReferences) {
  auto v = view::View::load(test::kFixtures + "/z2_ws2_fp32_pg2/checkpoint");
  const uint64_t layouts = at(*v, "/layouts").ino;
  const size_t idle = v->tree().size();
  const std::string f = "/layouts/zero3-dp7-fp32/global_step3/zero_pp_rank_6_mp_rank_00_optim_states.pt";
  const std::string before = content_of(*v, at(*v, f));  // made without a reference: dropped below
  std::vector<uint64_t> held;
  for (int w = 1; w <= 300; ++w) {
    const view::Inode* t = v->lookup(layouts, "zero3-dp" + std::to_string(w) + "-fp32", true);
    ASSERT_NE(t, nullptr);
    held.push_back(t->ino);
    if (w % 3 == 0) content_of(*v, at(*v, "/layouts/zero3-dp" + std::to_string(w) + "-fp32/latest"));
  }
  EXPECT_GT(v->tree().size(), idle + 300);
  for (uint64_t ino : held) v->forget(ino, 1);
  EXPECT_EQ(v->tree().size(), idle) << "every target the kernel let go of is dropped";
  // Made again on the next lookup, with the same bytes.
  EXPECT_EQ(content_of(*v, at(*v, f)), before);
}

}  // namespace
}  // namespace zm
