// layouts/ of tensor-, pipeline- and expert-parallel sources (issue 19): a target is served whole
// or not at all. A served one is the source merged to TP = PP = 1: indexed back, every parameter's
// state equals DeepSpeed's own ds_to_universal.py tensors, and every (sub-)group keeps its 'step'.
// A refused one is absent on lookup and named, with its reason, in layouts/README.
#include <gtest/gtest.h>

#include <filesystem>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/view/export.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;
using view::Inode;
using view::View;

const std::string kTag = "global_step2";
const std::vector<std::string> kTargets = {"zero1-dp1-fp32", "zero2-dp3-fp32", "zero3-dp2-fp16", "zero3-dp1-fp32",
                                           "bf16opt-dp2"};

struct Source {
  std::string fixture;
  std::string refusal;  // empty: every target is served; else a word of the reason
};
const std::vector<Source> kSources = {
    {"tp2_dp1_z1", ""},
    {"tp2_dp2_z2", ""},
    {"tp2_dp1_z3", ""},
    {"tp2_dp1_z1_fused", ""},
    {"tp2_dp1_z1_swiglu", "vocabulary parameter"},
    {"tp2_dp1_z1_avg", "averaged"},
    {"pp2_dp1_z1", "pipeline-parallel"},
    {"pp2_tp2_z1_patterns", "pipeline-parallel"},
    {"autoep_ep2_z2", "AutoEP"},
};

void PrintTo(const Source& s, std::ostream* os) {
  *os << s.fixture;
}

class ParallelLayouts : public ::testing::TestWithParam<Source> {};

// Served whole: every file of every listed or looked-up target builds; refused: absent, and the
// README names the own layout's refusal.
TEST_P(ParallelLayouts, ServedWholeOrNotAtAll) {
  const Source& s = GetParam();
  auto v = View::load(kFixtures + "/" + s.fixture + "/checkpoint");
  const Inode& root = at(*v, "/layouts");
  const std::string readme = content_of(*v, at(*v, "/layouts/README"));
  EXPECT_NE(readme.find("merged to TP=1 and PP=1"), std::string::npos) << readme;
  std::vector<std::string> names = kTargets;
  for (auto e = v->dir_entry(root, 2); e; e = v->dir_entry(root, e->next))
    if (e->name != "README") names.emplace_back(e->name);
  for (const std::string& name : names) {
    SCOPED_TRACE(s.fixture + " as " + name);
    const Inode* target = v->lookup(root.ino, name);
    if (!s.refusal.empty()) {
      EXPECT_EQ(target, nullptr);
      continue;
    }
    ASSERT_NE(target, nullptr);
    const Inode& tag = at(*v, "/layouts/" + name + "/" + kTag);
    for (auto e = v->dir_entry(tag, 2); e; e = v->dir_entry(tag, e->next))
      EXPECT_NO_THROW(content_of(*v, *e->node)) << e->name;
  }
  if (!s.refusal.empty()) {
    EXPECT_NE(readme.find("Not listed: "), std::string::npos) << readme;
    EXPECT_NE(readme.find(s.refusal), std::string::npos) << readme;
  }
}

// The fakes are real checkpoints at TP = 1: our indexer reads them back, and each parameter's
// fp32, exp_avg and exp_avg_sq are DeepSpeed's own universal tensors of the TP source.
class ServedParallelLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(ServedParallelLayouts, FakesHoldDeepSpeedsUniversalTensors) {
  const std::string fixture = GetParam();
  auto v = View::load(kFixtures + "/" + fixture + "/checkpoint");
  const std::string ref = kFixtures + "/" + fixture + "/ds_to_universal/global_step2_universal/zero/";
  for (const std::string name : {"zero1-dp1-fp32", "zero2-dp3-fp32", "zero3-dp2-fp32"}) {
    SCOPED_TRACE(fixture + " as " + name);
    const std::string out = temp_dir() + "/" + name;
    view::ExportOptions o;
    o.what = "layouts";
    o.below = name;
    ASSERT_NO_THROW(view::export_view(*v, out, o));
    const auto fake = ds::index_tag(out + "/" + kTag);
    EXPECT_FALSE(fake->parallel());
    ASSERT_FALSE(fake->params.empty());
    for (const ds::Param& p : fake->params)
      for (size_t k = 0; k < fake->state_names.size(); ++k) {
        auto theirs = pt::load_pt(ref + p.name + "/" + fake->state_names[k] + ".pt");
        const pt::Node* t = theirs->root->get("param");
        ASSERT_NE(t, nullptr) << p.name;
        EXPECT_EQ(t->tensor->shape, p.shape) << p.name;
        EXPECT_TRUE(test::fragment_bytes(*fake, p, k) == tensor_bytes(*theirs, *t->tensor))
            << p.name << " " << fake->state_names[k];
      }
    for (size_t g = 0; g < fake->scalars.size(); ++g)
      EXPECT_NE(fake->step(g), nullptr) << "group " << g << " keeps its step (torch's AdamW needs it)";
    fs::remove_all(out);
  }
}

INSTANTIATE_TEST_SUITE_P(Real, ParallelLayouts, ::testing::ValuesIn(kSources),
                         [](const auto& info) { return info.param.fixture; });
INSTANTIATE_TEST_SUITE_P(Real, ServedParallelLayouts,
                         ::testing::Values("tp2_dp1_z1", "tp2_dp2_z2", "tp2_dp1_z3", "tp2_dp1_z1_fused"));

}  // namespace
}  // namespace zm::test
