// Issue 19's real sources (DeepSpeed 0.19.6, tests/fixtures/README.md): a save before the first
// step, an optimizer whose per-parameter state is an int and a shape-[1] tensor, elastic saves.
// The index and the universal view against the live engine's state (meta/live_state.pt).
#include <gtest/gtest.h>

#include <cstring>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

struct Edge {
  std::string fixture, tag;
  std::vector<std::string> states, per_group;
  bool elastic = false;
};
const std::vector<Edge> kEdges = {
    {"z1_ws2_fp32_pg2_steps0", "global_step0", {"fp32"}, {}},
    {"z2_ws2_fp32_pg2_steps0", "global_step0", {"fp32"}, {}},
    {"z3_ws2_fp32_pg2_steps0", "global_step0", {"fp32"}, {}},
    {"z2_ws2_fp32_pg2_hybrid", "global_step3", {"fp32"}, {"integer_step", "tensor_step"}},
    {"z3_ws2_fp32_pg2_hybrid", "global_step3", {"fp32"}, {"integer_step", "tensor_step"}},
    {"z2_ws2_fp32_pg2_elastic", "global_step3", {"fp32", "exp_avg", "exp_avg_sq"}, {"step"}, true},
    {"z2_ws2_fp32_pg2_elastic_fusedadam", "global_step3", {"fp32", "exp_avg", "exp_avg_sq"}, {"step"}, true},
};

void PrintTo(const Edge& e, std::ostream* os) {
  *os << e.fixture;
}

class EdgeSource : public ::testing::TestWithParam<Edge> {
 protected:
  std::string dir() const { return kFixtures + "/" + GetParam().fixture; }
  std::string tag_dir() const { return dir() + "/checkpoint/" + GetParam().tag; }
};

TEST_P(EdgeSource, IndexEqualsTheLiveState) {
  const Edge& e = GetParam();
  const auto ix = ds::index_tag(tag_dir());
  EXPECT_EQ(ix->state_names, e.states);
  EXPECT_EQ(ix->scalar_names, e.per_group);
  EXPECT_EQ(ix->elastic, e.elastic);
  EXPECT_EQ(ix->has_state(), !e.per_group.empty());
  auto live = pt::load_pt(dir() + "/meta/live_state.pt");
  for (size_t k = 0; k < ix->state_names.size(); ++k) {
    const pt::Node* section = live->root->get(ix->state_names[k]);
    ASSERT_NE(section, nullptr) << ix->state_names[k];
    ASSERT_EQ(section->entries.size(), ix->params.size()) << ix->state_names[k];
    for (const auto& p : ix->params)
      EXPECT_TRUE(test::fragment_bytes(*ix, p, k) == tensor_bytes(*live, *section->get(p.name)->tensor))
          << p.name << " " << ix->state_names[k];
  }
  for (const char* none : {"exp_avg", "exp_avg_sq"}) {  // the live engine had none either
    if (ix->state_names.size() == 1) {
      EXPECT_TRUE(live->root->get(none)->entries.empty()) << none;
    }
  }
}

// Each group's values as the optimizer keeps them: counters at 3 after 3 steps.
TEST_P(EdgeSource, PerGroupValuesAreCarried) {
  const auto ix = ds::index_tag(tag_dir());
  const size_t groups = ix->stage == 3 ? ix->sub_groups : size_t(ix->num_groups);
  ASSERT_EQ(ix->scalars.size(), groups);
  for (const auto& values : ix->scalars) {
    ASSERT_EQ(values.size(), ix->scalar_names.size());
    for (size_t k = 0; k < values.size(); ++k) {
      const ds::StepValue& v = values[k];
      if (v.kind == ds::StepValue::Int) {
        EXPECT_EQ(v.i, 3) << ix->scalar_names[k];
        continue;
      }
      ASSERT_EQ(v.kind, ds::StepValue::Tensor) << ix->scalar_names[k];
      EXPECT_EQ(v.shape, ix->scalar_names[k] == "tensor_step" ? std::vector<int64_t>{1} : std::vector<int64_t>{});
      float f = 0;
      const std::string b = pt::File(ix->shards.at(v.extent.file).path).read_string(v.extent.offset, 4, "value");
      std::memcpy(&f, b.data(), 4);
      EXPECT_EQ(f, 3.0f) << ix->scalar_names[k];
    }
  }
}

// <T>_universal/zero/<param>/: a file per partitioned state and per per-group key, nothing else.
TEST_P(EdgeSource, UniversalFolderHasEveryKey) {
  const Edge& e = GetParam();
  auto v = view::View::load(dir() + "/checkpoint");
  const view::Inode* d = find(*v, "/" + e.tag + "_universal/zero/fc1.weight");
  ASSERT_NE(d, nullptr);
  std::vector<std::string> names;
  for (auto n = v->dir_entry(*d, 2); n; n = v->dir_entry(*d, n->next)) names.emplace_back(n->name);
  std::vector<std::string> want;
  for (const auto& s : e.states) want.push_back(s + ".pt");
  for (const auto& s : e.per_group) want.push_back(s + ".pt");
  std::sort(names.begin(), names.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);
}

INSTANTIATE_TEST_SUITE_P(Real, EdgeSource, ::testing::ValuesIn(kEdges),
                         [](const auto& info) { return info.param.fixture; });

// A rigid (ZeRO-3, BF16_Optimizer) target of an elastic save would need the hyper-parameters the
// save lacks: refused with that reason; ZeRO-1/2 targets are made in the elastic form.
TEST(EdgeSource, ElasticSourcesRefuseRigidOnlyTargets) {
  const auto ix = ds::index_tag(kFixtures + "/z2_ws2_fp32_pg2_elastic/checkpoint/global_step3");
  for (const char* name : {"zero3-dp2-fp32", "bf16opt-dp2"}) {
    try {
      ds::plan_partitions(*ix, *ds::parse_target(name));
      ADD_FAILURE() << name << " was planned";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("elastic_checkpoint"), std::string::npos) << err.what();
    }
  }
  EXPECT_NO_THROW(ds::plan_partitions(*ix, *ds::parse_target("zero1-dp5-bf16")));
}

}  // namespace
}  // namespace zm::test
