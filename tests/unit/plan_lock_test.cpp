// Plans are made before the tree's exclusive lock (issue 40, LazyDir::prepare): a first lookup of
// layouts/<target> decodes the source's model-state pickle and lays out every parameter, and under
// the exclusive lock every other lookup and listing of the mount would wait for it
// (bench/concurrent_ls.py measured 415 of 427 ms of stall at 20,000 parameters). Counted, not timed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/view/memo.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/tree.h"

namespace zm {
namespace {

namespace fs = std::filesystem;
using test::find;
using view::Inode;
using view::Tree;

// A folder whose prepare() waits until the test says another thread was answered meanwhile.
class WaitingDir final : public view::LazyDir {
 public:
  void prepare(std::string_view) const override {
    std::unique_lock<std::mutex> lock(mu);
    locked_in_prepare = Tree::exclusive_here();
    prepared = true;
    cv.notify_all();
    // The other thread's lookup ends the wait; the deadline only keeps a broken tree from hanging.
    answered_meanwhile = cv.wait_for(lock, std::chrono::seconds(20), [&] { return other_answered; });
  }
  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    made_after_prepare = prepared;
    return view::add_text(tree, dir, std::string(name), "made", {});
  }
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  mutable bool prepared = false, locked_in_prepare = true, answered_meanwhile = false, other_answered = false,
               made_after_prepare = false;
};

TEST(PlanLock, ALazyFolderPreparesHoldingNoTreeLockWhileOtherLookupsAreAnswered) {
  Tree tree({});
  const auto waiting = std::make_shared<WaitingDir>();
  tree.append([&](Tree& t) {
    view::add_text(t, Tree::kRoot, "other", "x", {});
    t.set_lazy(t.add_dir(Tree::kRoot, "lazy", {}), waiting);
  });
  const uint64_t lazy = tree.lookup(Tree::kRoot, "lazy")->ino;
  std::thread first([&] { EXPECT_NE(tree.lookup(lazy, "plan"), nullptr); });
  {
    std::unique_lock<std::mutex> lock(waiting->mu);
    ASSERT_TRUE(waiting->cv.wait_for(lock, std::chrono::seconds(20), [&] { return waiting->prepared; }))
        << "the lookup of a lazily made entry never prepared it";
  }
  // While the first lookup prepares: another lookup and a listing of the tree are answered.
  const Inode* other = tree.lookup(Tree::kRoot, "other");
  const Inode* listed = tree.listed_child(*tree.get(Tree::kRoot), 0);
  {
    std::lock_guard<std::mutex> lock(waiting->mu);
    waiting->other_answered = other && listed;
  }
  waiting->cv.notify_all();
  first.join();
  EXPECT_FALSE(waiting->locked_in_prepare);
  EXPECT_TRUE(waiting->answered_meanwhile) << "another lookup waited for the prepare";
  EXPECT_TRUE(waiting->made_after_prepare);
}

// Every plan a first lookup needs (a ZeRO target's, its rank files', the DCP folders') is made by
// prepare: none while the lookup's thread holds the tree's exclusive lock.
TEST(PlanLock, NoPlanIsMadeUnderTheTreesExclusiveLock) {
  auto v = view::View::load(test::kFixtures + "/z3_ws2_fp32_pg2/checkpoint");
  const std::string tag = "global_step3";
  auto& w = view::plan_weight();
  const uint64_t locked0 = w.made_under_tree_lock.load(), entries0 = w.entries.load();
  const std::vector<std::string> paths = {"/layouts/zero2-dp3-fp32/" + tag, "/layouts/zero1-dp5-bf16/" + tag,
                                          "/layouts/fsdp-dp2/pytorch_model_fsdp_0/.metadata",
                                          "/layouts/fsdp-dp3/optimizer_0/.metadata", "/" + tag + "_dcp/.metadata"};
  for (const std::string& path : paths) ASSERT_NE(find(*v, path), nullptr) << path;
  const Inode* rank = find(*v, "/layouts/zero2-dp3-fp32/" + tag + "/zero_pp_rank_2_mp_rank_00_optim_states.pt");
  ASSERT_NE(rank, nullptr);
  EXPECT_GT(test::content_of(*v, *rank).size(), 0u);
  EXPECT_GE(w.entries.load() - entries0, 5u) << "five plans made and kept";
  EXPECT_EQ(w.made_under_tree_lock.load() - locked0, 0u);
}

// A tag saved after the mount joins every layouts/ target made so far: its plans are made before the
// rescan's append (Provider::prepare_tag), not under it.
TEST(PlanLock, ATagSavedAfterTheMountJoinsTheTargetsWithItsPlansMadeFirst) {
  const std::string src = test::temp_dir() + "/ckpt";
  fs::copy(test::kFixtures + "/z2_ws2_fp32_pg2/checkpoint", src, fs::copy_options::recursive);
  view::ViewOptions o;
  o.rescan_seconds = 1e-9;  // every miss rescans
  auto v = view::View::load(src, o);
  ASSERT_NE(find(*v, "/layouts/zero3-dp4-fp32/global_step3"), nullptr);
  fs::copy(src + "/global_step3", src + "/global_step5", fs::copy_options::recursive);
  auto& w = view::plan_weight();
  const uint64_t locked0 = w.made_under_tree_lock.load();
  ASSERT_NE(find(*v, "/global_step5"), nullptr) << "a lookup of the new tag rescans";
  ASSERT_NE(find(*v, "/layouts/zero3-dp4-fp32/global_step5"), nullptr);
  ASSERT_NE(find(*v, "/layouts/zero2-dp2-fp32/global_step5"), nullptr) << "the own layout, listed";
  EXPECT_EQ(w.made_under_tree_lock.load() - locked0, 0u);
}

}  // namespace
}  // namespace zm
