// layouts/<target>/ through the View without mounting, beyond the key-by-key comparison with
// DeepSpeed's resaved files (layouts_view_test.cpp): plans shared and weighed, the names, the
// listing and presets, a real layouts/ folder; a fake indexed back equals its source, tensor for
// tensor (the round trip); and a target sized at stat is what it builds.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/model_file.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/export.h"
#include "zeromount/view/files/layout_files.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;
using view::Inode;
using view::View;

const std::string kTag = "global_step3";

// The DP fixtures: every stage and precision the index supports.
const std::vector<std::string> kSources = {"z1_ws2_fp32_pg2",       "z2_ws2_fp32_pg2",         "z3_ws2_fp32_pg2",
                                           "z3_ws2_fp32_pg2_sg200", "z1_ws2_bf16_pg2_fp32acc", "z2_ws2_bf16_pg2",
                                           "z3_ws2_bf16_pg2",       "z2_ws2_fp16_pg2"};

// Issue 29: the plans of one tag share one decoded model-state pickle, not one copy each.
TEST(LayoutsView, PlansOfOneTagShareOneDecodedSource) {
  auto v = View::load(kFixtures + "/z3_ws2_fp32_pg2/checkpoint");
  const uint64_t before = view::layout_source_decodes();
  for (int w = 2; w <= 9; ++w) {
    const std::string target = "/layouts/zero3-dp" + std::to_string(w) + "-fp32/" + kTag;
    const Inode* dir = find(*v, target);
    ASSERT_NE(dir, nullptr) << target;
    EXPECT_FALSE(listing(*v, *dir).empty());
  }
  EXPECT_EQ(view::layout_source_decodes() - before, 1u) << "8 plans, one decoded source";
}

// Issue 29: .zeromount/stats says what the kept plans weigh, and a plan weighs its partition
// vectors: at least the indices and offsets each parameter needs in them (4 + 8 bytes per entry),
// at most twice that plus a fixed part (no copy of names or of the source's pickle). Counted from
// the index here, not from the plan.
TEST(LayoutsView, StatsWeighTheKeptPlansByTheirPartitionVectors) {
  auto v = View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint");
  const auto stat = [&](const std::string& key) {
    const std::string text = content_of(*v, *find(*v, "/.zeromount/stats"));
    const size_t at = text.find("\n" + key + " ");
    EXPECT_NE(at, std::string::npos) << key << " in " << text;
    return std::stoull(text.substr(at + key.size() + 2));
  };
  const uint64_t kept0 = stat("plans_kept"), bytes0 = stat("plan_bytes");
  ASSERT_NE(find(*v, "/layouts/zero2-dp3-fp32/" + kTag), nullptr);
  ASSERT_NE(find(*v, "/layouts/zero3-dp5-fp32/" + kTag), nullptr);
  const uint64_t n = ds::index_tag(kFixtures + "/z2_ws2_fp32_pg2/checkpoint/" + kTag)->params.size();
  // Two plans; ZeRO-2: params and flat (4 bytes), offsets and flat_offsets (8) per parameter;
  // ZeRO-3: params (4) and offsets (8) per parameter, and its id in group_sub_groups (4).
  const uint64_t vectors = n * 24 + n * 16, least = 2 * sizeof(view::LayoutTag) + vectors;
  EXPECT_EQ(stat("plans_kept") - kept0, 2u);
  EXPECT_GE(stat("plan_bytes") - bytes0, least);
  EXPECT_LE(stat("plan_bytes") - bytes0, least + vectors + 2 * 1024) << "a plan keeps no copy of names or pickles";
}

// The plans keep a skeleton of the source's model-state pickle, not the decoded tree: every key
// of the root in order, the module's names in order (views of the index's), its _metadata, and
// none of the per-parameter values the target remakes.
TEST(LayoutsView, ASkeletonKeepsTheModulesNamesNotItsTensors) {
  const auto ix = ds::index_tag(kFixtures + "/z3_ws2_fp32_pg2/checkpoint/" + kTag);
  const auto decoded = pt::load_pt(ix->model_files.at(0));
  const auto sk = ds::model_skeleton(*ix, ix->frozen, decoded->root);
  EXPECT_EQ(sk->refusal, "");
  const pt::Node* module = decoded->root->get("module");
  ASSERT_NE(module, nullptr);
  ASSERT_EQ(sk->module_keys.size(), module->entries.size());
  for (size_t k = 0; k < module->entries.size(); ++k) EXPECT_EQ(sk->module_keys[k], module->entries[k].first->s);
  ASSERT_NE(sk->module_metadata, nullptr) << "the module's _metadata is kept";
  EXPECT_EQ(pt::repr(sk->module_metadata, 8), pt::repr(module->state, 8));
  ASSERT_EQ(sk->root->entries.size(), decoded->root->entries.size());
  for (size_t k = 0; k < sk->root->entries.size(); ++k) {
    const std::string key = sk->root->entries[k].first->s;
    EXPECT_EQ(key, decoded->root->entries[k].first->s);
    const pt::Node* value = sk->root->entries[k].second;
    if (key == "module" || key == "param_shapes" || key.starts_with("frozen_param_"))
      EXPECT_EQ(value->kind, pt::Kind::None) << key << " is remade by the target, not kept";
    else
      EXPECT_EQ(pt::repr(value, 8), pt::repr(decoded->root->entries[k].second, 8)) << key;
  }
  std::set<const char*> index_names;  // a kept name is the index's own string, not a copy
  for (const auto& p : ix->params) index_names.insert(p.name.data());
  for (const auto& b : ix->buffers) index_names.insert(b.name.data());
  for (const auto& f : ix->frozen) index_names.insert(f.name.data());
  for (const auto& [alias, canonical] : ix->shared) index_names.insert(alias.data());
  for (std::string_view name : sk->module_keys) EXPECT_TRUE(index_names.count(name.data())) << name;

  pt::Node* odd = const_cast<pt::Node*>(module);  // a module entry no target can present refuses them all
  pt::Arena a;
  odd->entries.emplace_back(a.make_str("not.in.the.index"), a.make_int(1));
  const auto refused = ds::model_skeleton(*ix, ix->frozen, decoded->root);
  EXPECT_NE(refused->refusal.find("'not.in.the.index'"), std::string::npos) << refused->refusal;
  EXPECT_TRUE(refused->module_keys.empty());
}

TEST(LayoutsView, NamesListingAndPresets) {
  view::ViewOptions o;
  o.layout_presets = {"zero3-dp64-bf16", "zero2-dp2-fp32", "zero1-dp3-fp32"};
  auto v = View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint", o);
  const Inode* root = find(*v, "/layouts");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(listing(*v, *root),
            (std::vector<std::string>{"README", "zero2-dp2-fp32", "zero3-dp64-bf16", "zero1-dp3-fp32"}))
      << "README, the own layout (a self-check), then the presets once each";
  for (const char* bad : {"zero3-dp064-bf16", "zero3-dp0-fp32", "zero3-dp65537-fp32", "ZERO3-dp4-fp32",
                          "zero3-dp4-fp32-rr", "zero2-dp4-fp32-sg7", "zero3-dp4-fp32-sg1000000000", "bf16opt-dp4-bf16",
                          "zero3-dp4", "zero3-dp4-fp32 ", "zero4-dp4-fp32", "README2"})
    EXPECT_EQ(v->lookup(root->ino, bad), nullptr) << bad;
  const Inode* big = v->lookup(root->ino, "zero3-dp65536-bf16");
  ASSERT_NE(big, nullptr) << "any valid name resolves on lookup";
  EXPECT_EQ(v->lookup(root->ino, "zero3-dp65536-bf16"), big) << "and keeps its inode";
  EXPECT_EQ(listing(*v, *root).size(), 4u) << "looked-up names are not listed";
  const size_t nodes = v->tree().size();
  const Inode* tag = v->lookup(big->ino, kTag);
  ASSERT_NE(tag, nullptr);
  EXPECT_LE(v->tree().size(), nodes + 1) << "rank files are made on lookup, not with the target";
  const Inode* last = v->lookup(tag->ino, "bf16_zero_pp_rank_65535_mp_rank_00_optim_states.pt");
  ASSERT_NE(last, nullptr);
  EXPECT_GT(v->attr(*last).st_size, 0);
  EXPECT_EQ(v->lookup(tag->ino, "bf16_zero_pp_rank_65536_mp_rank_00_optim_states.pt"), nullptr);
  EXPECT_EQ(v->lookup(tag->ino, "zero_pp_rank_0_mp_rank_00_optim_states.pt"), nullptr) << "bf16 files are prefixed";
  EXPECT_EQ(v->lookup(tag->ino, "bf16_zero_pp_rank_01_mp_rank_00_optim_states.pt"), nullptr);
  EXPECT_EQ(v->lookup(tag->ino, "mp_rank_00_model_states.pt"), nullptr) << "ZeRO-3 has per-rank model files";
  const std::string readme = content_of(*v, *find(*v, "/layouts/README"));
  EXPECT_NE(readme.find("own layout: zero2-dp2-fp32"), std::string::npos);
  EXPECT_NE(readme.find("tensor-equal to the real files"), std::string::npos) << readme;
  EXPECT_NE(readme.find("not byte-equal"), std::string::npos) << readme;
  EXPECT_EQ(readme.find("issue"), std::string::npos) << "the text a user reads cites no tracker number";
}

TEST(LayoutsView, RenamedFolderAndRefusedPresets) {
  view::ViewOptions o;
  o.layouts_dir = "fakes";
  o.layout_presets = {"nonsense"};
  EXPECT_THROW(View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint", o), Error) << "an invalid preset is refused";
  o.layout_presets = {};
  auto v = View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint", o);
  EXPECT_EQ(find(*v, "/layouts"), nullptr);
  EXPECT_NE(find(*v, "/fakes/zero1-dp7-fp32/" + kTag + "/zero_pp_rank_6_mp_rank_00_optim_states.pt"), nullptr);
}

TEST(LayoutsView, ARealLayoutsFolderWins) {
  const std::string src = temp_dir() + "/ckpt";
  copy_fixture("z2_ws2_fp32_pg2/checkpoint", src);
  fs::create_directory(src + "/layouts");
  write_file(src + "/layouts/mine.txt", "real");
  auto v = View::load(src);
  const Inode* real = find(*v, "/layouts");
  ASSERT_NE(real, nullptr);
  EXPECT_EQ(real->made_by, nullptr);
  EXPECT_EQ(listing(*v, *real), std::vector<std::string>{"mine.txt"});
  EXPECT_EQ(v->lookup(real->ino, "zero3-dp4-fp32"), nullptr) << "the real folder is shown as is";
  view::ViewOptions o;
  o.layouts_dir = "fakes";
  auto w = View::load(src, o);
  EXPECT_NE(find(*w, "/fakes/zero3-dp4-fp32/" + kTag), nullptr) << "-o layouts_dir=NAME picks another name";
}

// ---- (2) round trip: a fake, indexed back by our own indexer, equals its source ----

// The first n bytes of `extents`.
std::string extent_bytes(const ds::TagIndex& ix, const std::vector<pt::Extent>& extents, uint64_t n) {
  return test::extent_bytes(ix, extents).substr(0, n);
}

void expect_same_state(const ds::TagIndex& src, const ds::TagIndex& fake, const std::string& what) {
  ASSERT_EQ(fake.params.size(), src.params.size()) << what;
  EXPECT_EQ(fake.state_names, src.state_names) << what;
  EXPECT_EQ(fake.num_groups, src.num_groups) << what;
  for (const ds::Param& p : src.params) {
    const ds::Param* q = fake.find(p.name);
    ASSERT_NE(q, nullptr) << what << ": " << p.name;
    EXPECT_EQ(q->shape, p.shape) << what << ": " << p.name;
    EXPECT_EQ(q->group, p.group) << what << ": " << p.name;
    for (size_t k = 0; k < src.state_names.size(); ++k) {
      EXPECT_TRUE(fragment_bytes(fake, *q, k) == fragment_bytes(src, p, k))
          << what << ": " << p.name << " " << src.state_names[k];
    }
    EXPECT_EQ(fake.scalar_names, src.scalar_names) << what;
    const auto &a = src.scalars.at(size_t(p.step)), &b = fake.scalars.at(size_t(q->step));
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].kind, b[k].kind) << what << ": " << src.scalar_names[k];
      EXPECT_EQ(a[k].shape, b[k].shape) << what << ": " << src.scalar_names[k];
      EXPECT_EQ(a[k].i, b[k].i) << what << ": " << src.scalar_names[k];
      const uint64_t n = a[k].extent.length;
      if (a[k].kind == ds::StepValue::Tensor) {
        EXPECT_EQ(extent_bytes(src, {a[k].extent}, n), extent_bytes(fake, {b[k].extent}, n))
            << what << ": " << src.scalar_names[k];
      }
    }
  }
  ASSERT_EQ(fake.buffers.size(), src.buffers.size()) << what;
  for (size_t k = 0; k < src.buffers.size(); ++k) {
    const uint64_t n = src.buffers[k].numel() * pt::element_size(src.buffers[k].dtype);
    EXPECT_EQ(fake.buffers[k].name, src.buffers[k].name) << what;
    EXPECT_TRUE(extent_bytes(fake, fake.buffers[k].data, n) == extent_bytes(src, src.buffers[k].data, n)) << what;
  }
}

// Issue 19's real sources: round robin, saves before the first step, per-group values other than
// 'step' (integer_step, a shape-[1] tensor_step), elastic saves (torch AdamW and FusedAdam).
const std::vector<std::string> kEdgeSources = {
    "z1_ws2_fp32_pg2_rr",     "z1_ws2_fp32_pg2_steps0", "z2_ws2_fp32_pg2_steps0",  "z3_ws2_fp32_pg2_steps0",
    "z2_ws2_fp32_pg2_hybrid", "z3_ws2_fp32_pg2_hybrid", "z2_ws2_fp32_pg2_elastic", "z2_ws2_fp32_pg2_elastic_fusedadam"};

TEST(LayoutsRoundTrip, EveryFixtureIntoEveryStageAtDp1_3_8_64) {
  // One precision per stage, so that every conversion is crossed; masters stay fp32 in all.
  const std::vector<std::string> stages = {"zero1-dp{}-fp32", "zero2-dp{}-bf16", "zero3-dp{}-fp16", "bf16opt-dp{}"};
  std::vector<std::string> sources = kSources;
  sources.insert(sources.end(), kEdgeSources.begin(), kEdgeSources.end());
  for (const std::string& fixture : sources) {
    auto v = View::load(kFixtures + "/" + fixture + "/checkpoint");
    const std::string tag = fixture_latest(fixture);
    const auto src = ds::index_tag(kFixtures + "/" + fixture + "/checkpoint/" + tag);
    for (const std::string& pattern : stages)
      for (int dp : {1, 3, 8, 64}) {
        std::string name = pattern;
        name.replace(name.find("{}"), 2, std::to_string(dp));
        const std::string what = fixture + " as " + name;
        const std::string out = temp_dir() + "/" + name;
        view::ExportOptions o;
        o.what = "layouts";
        o.below = name;
        if (src->elastic && (name.starts_with("zero3") || name.starts_with("bf16opt"))) {
          EXPECT_EQ(v->lookup(find(*v, "/layouts")->ino, name), nullptr) << what << ": refused";
          continue;  // the rigid form needs the hyper-parameters an elastic save lacks
        }
        ASSERT_NO_THROW(view::export_view(*v, out, o)) << what;
        std::unique_ptr<ds::TagIndex> fake;
        ASSERT_NO_THROW(fake = ds::index_tag(out + "/" + tag)) << what;
        EXPECT_EQ(fake->elastic, src->elastic) << what << ": an elastic source is faked in its form";
        EXPECT_EQ(fake->dp, dp) << what;
        if (name.starts_with("bf16opt")) {
          EXPECT_TRUE(fake->bf16_optimizer) << what;
        } else {
          EXPECT_EQ(fake->stage, name[4] - '0') << what;
        }
        // The fake carries SRC's ds_config (spec §2.1), so it names itself only at SRC's precision
        // and round robin.
        const auto target = ds::parse_target(name);
        const ds::TargetLayout own = ds::source_layout(*src);
        if (target->precision == own.precision && target->round_robin == own.round_robin) {
          EXPECT_EQ(ds::target_name(ds::source_layout(*fake)), name) << what << ": the fake names itself";
        }
        expect_same_state(*src, *fake, what);
        fs::remove_all(out);
      }
  }
}

// ZeRO-3 rank files are sized without building each one (`ls -l` of thousands of them): the sized
// size must be the built size, for every fixture, every target kind, every rank (W' = 1, the
// source's W with each rank's own buffers, odd W', -sg), with and without -o crc. ZeRO-1/2 and
// bf16opt files are built to be sized.
TEST(LayoutsSizer, SizedIsBuiltForEveryFixtureAndTargetKind) {
  std::vector<std::string> fixtures = kSources;
  fixtures.insert(fixtures.end(), kEdgeSources.begin(), kEdgeSources.end());
  for (const char* parallel : {"tp2_dp1_z1", "tp2_dp1_z3", "tp2_dp2_z2"}) fixtures.emplace_back(parallel);
  const std::vector<std::string> targets = {"zero3-dp1-fp32",      "zero3-dp2-bf16", "zero3-dp3-fp16",
                                            "zero3-dp11-fp32-sg7", "zero1-dp3-fp32", "zero2-dp2-bf16-rr",
                                            "bf16opt-dp3"};
  size_t sized = 0;
  for (const std::string& fixture : fixtures)
    for (bool crc : {false, true}) {
      view::ViewOptions o;
      o.crc = crc;
      auto v = View::load(kFixtures + "/" + fixture + "/checkpoint", o);
      const std::string tag = fixture_latest(fixture);
      for (const std::string& target : targets) {
        const Inode* root = find(*v, "/layouts");
        const Inode* t = v->lookup(root->ino, target);
        if (!t) continue;  // refused (an elastic source at ZeRO-3, bf16opt)
        const Inode& dir = at(*v, "/layouts/" + target + "/" + tag);
        for (auto e = v->dir_entry(dir, 2); e; e = v->dir_entry(dir, e->next)) {
          SCOPED_TRACE(fixture + " as " + target + (crc ? " -o crc: " : ": ") + std::string(e->name));
          EXPECT_EQ(bool(e->node->file().sizer), target.starts_with("zero3"));
          if (!e->node->file().sizer) continue;
          const uint64_t size = e->node->file().sizer();
          EXPECT_EQ(uint64_t(v->attr(*e->node).st_size), size);
          EXPECT_EQ(v->open(*e->node, O_RDONLY).size(), size) << "the built file has the sized size";
          ++sized;
        }
      }
    }
  EXPECT_GT(sized, 1000u);
}

}  // namespace
}  // namespace zm::test
