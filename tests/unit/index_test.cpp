// The index against DeepSpeed's own tools: assembling every parameter from the index's extents
// gives exactly ds_to_universal.py's tensors and zero_to_fp32.py's state dict, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/field.h"
#include "zeromount/pt/error.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;

std::string assemble(const ds::TagIndex& ix, const std::vector<pt::Extent>& extents, uint64_t nbytes) {
  std::string out;
  for (const auto& e : extents) out += pt::File(ix.shards.at(e.file).path).read_string(e.offset, e.length, "extent");
  return out.substr(0, nbytes);
}

std::vector<pt::Extent> extents_of(const std::vector<ds::Fragment>& frags) {
  std::vector<pt::Extent> v;
  for (const auto& f : frags) v.push_back(f.extent);
  return v;
}

// The tensor of a ds_to_universal file: {'param': T, ...} (stage <= 2) or a bare tensor (stage 3).
std::string universal_bytes(const std::string& path) {
  auto f = pt::load_pt(path);
  const pt::Node* t = f->root->kind == pt::Kind::Dict ? f->root->get("param") : f->root;
  return tensor_bytes(*f, *t->tensor);
}

class Fixture : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return kFixtures + "/" + GetParam(); }
};

TEST_P(Fixture, StatesEqualDsToUniversal) {
  auto ix = ds::index_tag(dir() + "/checkpoint/global_step3");
  EXPECT_EQ(ix->dp, 2);
  EXPECT_EQ(ix->state_names, (std::vector<std::string>{"fp32", "exp_avg", "exp_avg_sq"}));
  ASSERT_EQ(ix->params.size(), 9u);
  for (const auto& p : ix->params) {
    for (size_t k = 0; k < ix->state_names.size(); ++k) {
      SCOPED_TRACE(p.name + "/" + ix->state_names[k]);
      const std::string ref = universal_bytes(dir() + "/ds_to_universal/global_step3_universal/zero/" + p.name + "/" +
                                              ix->state_names[k] + ".pt");
      EXPECT_EQ(ref.size(), p.numel * 4);
      EXPECT_EQ(assemble(*ix, extents_of(ix->fragments(p, k)), p.numel * 4), ref);
    }
  }
}

TEST_P(Fixture, WeightsEqualZeroToFp32) {
  auto ix = ds::index_tag(dir() + "/checkpoint/global_step3");
  auto ref = pt::load_pt(dir() + "/zero_to_fp32/pytorch_model.bin");
  std::set<std::string> expected, ours;
  for (const auto& [k, v] : ref->root->entries) expected.insert(k->s);
  auto check = [&](const std::string& name, const std::string& bytes) {
    SCOPED_TRACE(name);
    ours.insert(name);
    const pt::Node* t = ref->root->get(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(bytes, tensor_bytes(*ref, *t->tensor));
  };
  for (const auto& p : ix->params) check(p.name, assemble(*ix, extents_of(ix->fragments(p, 0)), p.numel * 4));
  for (const auto& f : ix->frozen) check(f.name, assemble(*ix, f.data, f.numel() * 4));
  for (const auto& b : ix->buffers) check(b.name, assemble(*ix, b.data, b.numel() * 4));
  for (const auto& [alias, canon] : ix->shared) ours.insert(alias);
  EXPECT_EQ(ours, expected);
}

TEST_P(Fixture, StepAndGroups) {
  auto ix = ds::index_tag(dir() + "/checkpoint/global_step3");
  EXPECT_EQ(ix->num_groups, 2);
  ASSERT_FALSE(ix->steps.empty());
  EXPECT_EQ(ix->steps[0].kind, ds::StepValue::Tensor);
  ASSERT_NE(ix->param_groups, nullptr);
  EXPECT_EQ(ix->param_groups->items.size(), 2u);
  ASSERT_NE(ix->optim_meta, nullptr);
  EXPECT_NE(ix->optim_meta->get("loss_scaler"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Real, Fixture, ::testing::ValuesIn(kFixtureNames));

// A copy of a fixture's tag folder in a temp dir, to break.
std::string copy_tag(const std::string& name) {
  const std::string dst = temp_dir() + "/global_step3";
  fs::copy(kFixtures + "/" + name + "/checkpoint/global_step3", dst);
  return dst;
}

std::string index_error(const std::string& tag_dir) {
  try {
    ds::index_tag(tag_dir);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(BrokenCheckpoint, MissingRankFileIsNamed) {
  for (const char* name : {"z2_ws2_fp32_pg2", "z3_ws2_fp32_pg2"}) {
    const std::string d = copy_tag(name);
    fs::remove(d + "/zero_pp_rank_0_mp_rank_00_optim_states.pt");
    EXPECT_NE(index_error(d).find("zero_pp_rank_0_mp_rank_00_optim_states.pt: missing"), std::string::npos)
        << index_error(d);
  }
  const std::string d = copy_tag("z3_ws2_fp32_pg2");
  fs::remove(d + "/zero_pp_rank_1_mp_rank_00_model_states.pt");
  EXPECT_NE(index_error(d).find("zero_pp_rank_1_mp_rank_00_model_states.pt: missing"), std::string::npos)
      << index_error(d);
}

TEST(BrokenCheckpoint, TruncatedPickleIsNamed) {
  const std::string d = copy_tag("z2_ws2_fp32_pg2");
  const std::string f = d + "/zero_pp_rank_1_mp_rank_00_optim_states.pt";
  const std::string bytes = read_file(f);
  write_file(f, bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(index_error(d).find("zero_pp_rank_1_mp_rank_00_optim_states.pt"), std::string::npos) << index_error(d);
}

TEST(BrokenCheckpoint, ExtraRankFileDisagreesWithWorldSize) {
  const std::string d = copy_tag("z2_ws2_fp32_pg2");
  fs::copy(d + "/zero_pp_rank_1_mp_rank_00_optim_states.pt", d + "/zero_pp_rank_2_mp_rank_00_optim_states.pt");
  const std::string err = index_error(d);
  EXPECT_NE(err.find("dp_world_size"), std::string::npos) << err;
  EXPECT_NE(err.find("mp_rank_00_model_states.pt"), std::string::npos) << err;
}

TEST(BrokenCheckpoint, UnsupportedLayoutsAreRefusedClearly) {
  const std::string d = copy_tag("z2_ws2_fp32_pg2");
  fs::copy(d + "/mp_rank_00_model_states.pt", d + "/mp_rank_01_model_states.pt");
  EXPECT_NE(index_error(d).find("model-parallel"), std::string::npos) << index_error(d);
  const std::string e = copy_tag("z2_ws2_fp32_pg2");
  fs::copy(e + "/mp_rank_00_model_states.pt", e + "/layer_01-model_00-model_states.pt");
  EXPECT_NE(index_error(e).find("pipeline-parallel"), std::string::npos) << index_error(e);
}

}  // namespace
}  // namespace zm::test
