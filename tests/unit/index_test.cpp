// The index against DeepSpeed's own tools: assembling every parameter from the index's extents
// gives exactly ds_to_universal.py's tensors and zero_to_fp32.py's state dict, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <tuple>

#include "helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/field.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/zip_reader.h"

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

// DeepSpeed 0.19.6 runs in 16-bit precision (the fp32 ones are kFixtureNames).
const std::vector<std::string> k16BitFixtures = {"z1_ws2_bf16_pg2_fp32acc", "z2_ws2_bf16_pg2", "z3_ws2_bf16_pg2",
                                                 "z2_ws2_fp16_pg2"};

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

// A dict of tensors in a reference file: zero_to_fp32's state dict, or a section of live_state.pt.
struct Reference {
  std::unique_ptr<pt::PtFile> file;
  const pt::Node* dict = nullptr;
  std::string bytes(const std::string& name) const {
    const pt::Node* t = dict->get(name);
    return t ? tensor_bytes(*file, *t->tensor) : "(missing)";
  }
  std::set<std::string> names() const {
    std::set<std::string> s;
    for (const auto& [k, v] : dict->entries) s.insert(k->s);
    return s;
  }
};

Reference live_state(const std::string& dir, const char* section) {
  Reference r{pt::load_pt(dir + "/meta/live_state.pt")};
  r.dict = r.file->root->get(section);
  return r;
}

uint64_t nbytes(const ds::PlainTensor& t) {
  return t.numel() * pt::element_size(t.dtype);
}

// Trainable (fp32 master) + frozen + buffers are zero_to_fp32's output. BF16_Optimizer files
// make zero_to_fp32 fail (FAILED.txt), so there the live engine's state is the reference.
TEST_P(Fixture, WeightsEqualZeroToFp32) {
  auto ix = ds::index_tag(dir() + "/checkpoint/global_step3");
  if (ix->optimizer == ds::OptimizerClass::BF16_Optimizer) {
    ASSERT_FALSE(fs::exists(dir() + "/zero_to_fp32/pytorch_model.bin"));
    const Reference fp32 = live_state(dir(), "fp32"), buffers = live_state(dir(), "buffers");
    for (const auto& p : ix->params)
      EXPECT_EQ(assemble(*ix, extents_of(ix->fragments(p, 0)), p.numel * 4), fp32.bytes(p.name)) << p.name;
    EXPECT_TRUE(ix->frozen.empty());  // zero_to_fp32's meaning: BF16_Optimizer saves none outside 'module'
    for (const auto& b : ix->buffers) EXPECT_EQ(assemble(*ix, b.data, nbytes(b)), buffers.bytes(b.name)) << b.name;
    EXPECT_EQ(ix->params.size(), fp32.names().size());
    return;
  }
  Reference ref{pt::load_pt(dir() + "/zero_to_fp32/pytorch_model.bin")};
  ref.dict = ref.file->root;
  std::set<std::string> ours;
  auto check = [&](const std::string& name, const std::string& bytes) {
    ours.insert(name);
    EXPECT_EQ(bytes, ref.bytes(name)) << name;
  };
  for (const auto& p : ix->params) check(p.name, assemble(*ix, extents_of(ix->fragments(p, 0)), p.numel * 4));
  for (const auto& f : ix->frozen) check(f.name, assemble(*ix, f.data, nbytes(f)));
  for (const auto& b : ix->buffers) check(b.name, assemble(*ix, b.data, nbytes(b)));
  for (const auto& [alias, canon] : ix->shared) ours.insert(alias);
  EXPECT_EQ(ours, ref.names());
}

// The training-precision module: every trainable weight and frozen parameter as the live engine
// held it (stage 1/2 and BF16_Optimizer keep full copies; stage 3 only placeholders).
TEST_P(Fixture, ModuleEqualsLiveState) {
  auto ix = ds::index_tag(dir() + "/checkpoint/global_step3");
  const Reference lp = live_state(dir(), "lp"), frozen = live_state(dir(), "frozen");
  EXPECT_EQ(ix->module_dtype, lp.dict->entries.at(0).second->tensor->dtype);
  if (ix->stage == 3) {
    EXPECT_TRUE(ix->module_weights.empty());
    EXPECT_TRUE(ix->module_frozen.empty());
    for (const auto& f : ix->frozen) EXPECT_EQ(assemble(*ix, f.data, nbytes(f)), frozen.bytes(f.name)) << f.name;
    return;
  }
  ASSERT_EQ(ix->module_weights.size(), ix->params.size());
  for (const auto& w : ix->module_weights) {
    EXPECT_EQ(w.dtype, ix->module_dtype);
    EXPECT_EQ(assemble(*ix, w.data, nbytes(w)), lp.bytes(w.name)) << w.name;
  }
  std::set<std::string> names;
  for (const auto& f : ix->module_frozen) {
    names.insert(f.name);
    EXPECT_EQ(f.dtype, ix->module_dtype);
    EXPECT_EQ(assemble(*ix, f.data, nbytes(f)), frozen.bytes(f.name)) << f.name;
  }
  EXPECT_EQ(names, frozen.names());
}

TEST_P(Fixture, StepAndGroups) {
  auto ix = ds::index_tag(dir() + "/checkpoint/global_step3");
  EXPECT_EQ(ix->num_groups, 2);
  EXPECT_EQ(ix->scalar_names, std::vector<std::string>{"step"});
  ASSERT_NE(ix->step(0), nullptr);
  EXPECT_EQ(ix->step(0)->kind, ds::StepValue::Tensor);
  EXPECT_EQ(ix->step_kind, ds::StepValue::Tensor);  // torch AdamW: a 0-d float32 tensor
  ASSERT_NE(ix->param_groups, nullptr);
  EXPECT_EQ(ix->param_groups->items.size(), 2u);
  ASSERT_NE(ix->optim_meta, nullptr);
  // BF16_Optimizer.state_dict has no loss-scale keys (spec §3.2.2).
  EXPECT_EQ(ix->optim_meta->get("loss_scaler") != nullptr, ix->optimizer != ds::OptimizerClass::BF16_Optimizer);
}

// fragments(p, k, from, count) is the full list filtered to the pieces that hold some of the range.
TEST_P(Fixture, RangedFragmentsAreTheOverlappingOnes) {
  auto ix = ds::index_tag(dir() + "/checkpoint/global_step3");
  auto key = [](const std::vector<ds::Fragment>& v) {
    std::vector<std::tuple<uint32_t, uint64_t, uint64_t, uint32_t, uint64_t, uint64_t>> out;
    for (const auto& f : v) out.emplace_back(f.rank, f.start, f.numel, f.extent.file, f.extent.offset, f.extent.length);
    return out;
  };
  for (const auto& p : ix->params) {
    for (size_t k = 0; k < ix->state_names.size(); ++k) {
      const auto all = ix->fragments(p, k);
      const uint64_t n = p.numel;
      for (auto [from, count] : std::vector<std::pair<uint64_t, uint64_t>>{{0, n},
                                                                           {0, 1},
                                                                           {n - 1, 1},
                                                                           {n / 2, 1},
                                                                           {n / 3, n / 3 + 1},
                                                                           {n / 2, n - n / 2},
                                                                           {0, n / 2 + 1},
                                                                           {n, 0}}) {
        SCOPED_TRACE(p.name + "/" + ix->state_names[k] + " [" + std::to_string(from) + ", +" + std::to_string(count) +
                     ")");
        std::vector<ds::Fragment> want;
        for (const auto& f : all)
          if (f.numel && f.start < from + count && f.start + f.numel > from) want.push_back(f);
        EXPECT_EQ(key(ix->fragments(p, k, from, count)), key(want));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Real, Fixture, ::testing::ValuesIn(kFixtureNames));
INSTANTIATE_TEST_SUITE_P(SixteenBit, Fixture, ::testing::ValuesIn(k16BitFixtures));

// What each real run's train.json and pickles say (optimizer_wrapper, module_dtype, loss_scale).
TEST(Precision, RealRunsAreRecognised) {
  struct Case {
    const char* name;
    ds::OptimizerClass optimizer;
    pt::DType module;
    ds::LossScaler::Kind scaler;
  };
  using O = ds::OptimizerClass;
  const Case cases[] = {
      {"z1_ws2_fp32_pg2", O::DeepSpeedZeroOptimizer, pt::DType::F32, ds::LossScaler::Static},
      {"z3_ws2_fp32_pg2", O::DeepSpeedZeroOptimizer_Stage3, pt::DType::F32, ds::LossScaler::Static},
      {"z1_ws2_bf16_pg2_fp32acc", O::BF16_Optimizer, pt::DType::BF16, ds::LossScaler::None},
      {"z2_ws2_bf16_pg2", O::DeepSpeedZeroOptimizer, pt::DType::BF16, ds::LossScaler::Static},
      {"z3_ws2_bf16_pg2", O::DeepSpeedZeroOptimizer_Stage3, pt::DType::BF16, ds::LossScaler::Static},
      {"z2_ws2_fp16_pg2", O::DeepSpeedZeroOptimizer, pt::DType::F16, ds::LossScaler::Dynamic},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto ix = ds::index_tag(kFixtures + "/" + c.name + "/checkpoint/global_step3");
    EXPECT_EQ(ix->optimizer, c.optimizer);
    EXPECT_EQ(ix->bf16_optimizer, c.optimizer == O::BF16_Optimizer);
    EXPECT_EQ(ix->master_dtype, pt::DType::F32);
    EXPECT_EQ(ix->module_dtype, c.module);
    EXPECT_EQ(ix->loss_scaler.kind, c.scaler);
    if (c.scaler == ds::LossScaler::Static) {
      EXPECT_EQ(ix->loss_scaler.cur_scale, 1.0);
      EXPECT_FALSE(ix->loss_scaler.dynamic);
    }
  }
}

// z2_ws2_fp16_pg2's DynamicLossScaler after 3 steps without overflow (meta/structure_checkpoint.txt).
TEST(Precision, DynamicLossScalerFields) {
  auto ix = ds::index_tag(kFixtures + "/z2_ws2_fp16_pg2/checkpoint/global_step3");
  const ds::LossScaler& ls = ix->loss_scaler;
  EXPECT_EQ(ls.kind, ds::LossScaler::Dynamic);
  EXPECT_EQ(ls.cur_scale, 256);
  EXPECT_TRUE(ls.dynamic);
  EXPECT_EQ(ls.cur_iter, 3);
  EXPECT_EQ(ls.last_overflow_iter, -1);
  EXPECT_EQ(ls.scale_factor, 2.0);
  EXPECT_EQ(ls.scale_window, 1000);
  EXPECT_EQ(ls.min_scale, 1);
  EXPECT_EQ(ls.delayed_shift, 2);
  EXPECT_EQ(ls.cur_hysteresis, 2);
  EXPECT_FALSE(ls.consecutive_hysteresis);
  EXPECT_TRUE(ls.raise_error_at_min_scale);
  EXPECT_EQ(ls.dtype, pt::DType::F16);
}

// A copy of a fixture's tag folder in a temp dir, to break.
std::string copy_tag(const std::string& name) {
  const std::string dst = temp_dir() + "/global_step3";
  copy_fixture(name + "/checkpoint/global_step3", dst);
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

TEST(BrokenCheckpoint, IncompleteParallelGridsAreRefusedClearly) {
  // A second model-state file makes a (pp, tp) grid of two cells, whose rank-1 files are missing.
  const std::string d = copy_tag("z2_ws2_fp32_pg2");
  fs::copy(d + "/mp_rank_00_model_states.pt", d + "/mp_rank_01_model_states.pt");
  EXPECT_NE(index_error(d).find("Checkpoint model-state file count 2 does not match"), std::string::npos)
      << index_error(d);
  // Layer files without a layer_01* one: DeepSpeed's _validate_folder text.
  const std::string e = copy_tag("z2_ws2_fp32_pg2");
  fs::copy(e + "/mp_rank_00_model_states.pt", e + "/layer_02-model_00-model_states.pt");
  EXPECT_NE(index_error(e).find("seems a bogus DeepSpeed checkpoint folder: Cannot find layer_01* files"),
            std::string::npos)
      << index_error(e);
}

}  // namespace
}  // namespace zm::test

namespace zm {
namespace {

// DeepSpeed's file names (spec §2.2), as its own writers spell them: one parser classifies them
// for the data-parallel and the parallel indexers alike.
TEST(ShardNames, EveryKindDeepSpeedWrites) {
  using ds::FileKind;
  const auto kind = [](const char* f) { return ds::parse_shard_name(f).value().kind; };
  EXPECT_EQ(kind("mp_rank_00_model_states.pt"), FileKind::ModelStates);
  EXPECT_EQ(kind("zero_pp_rank_3_mp_rank_01_model_states.pt"), FileKind::ZeroModelStates);
  EXPECT_EQ(kind("bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt"), FileKind::OptimStates);
  EXPECT_EQ(kind("zero_pp_rank_3_mp_rank_00optim_states.pt"), FileKind::OptimStates) << "the legacy name";
  EXPECT_EQ(ds::parse_shard_name("layer_01-model_states.pt")->layer, 1);
  EXPECT_EQ(ds::parse_shard_name("layer_12-model_01-model_states.pt")->layer, 12);
  EXPECT_EQ(kind("layer_3_expert_7_mp_rank_00_model_states.pt"), FileKind::ExpertStates);
  EXPECT_EQ(kind("expert_7_mp_rank_00_model_states.pt"), FileKind::ExpertStates);
  EXPECT_EQ(kind("expp_rank_1_mp_rank_00_optim_states.pt"), FileKind::ExpertOptim);
  for (const char* other : {"latest", "zero_to_fp32.py", "mp_rank_00_model_states.pt.tmp", "layer_x-model_states.pt"})
    EXPECT_EQ(ds::parse_shard_name(other), std::nullopt) << other;
}

}  // namespace
}  // namespace zm

namespace zm::test {
namespace {

// What an independent decode of `model` says: the byte offset of `module[buffer]` and of
// `frozen_param_fragments[frozen]`.
std::pair<uint64_t, uint64_t> own_offsets(const std::string& model, const std::string& buffer,
                                          const std::string& frozen) {
  auto pt = pt::load_pt(model);
  const ds::Field root(pt->root, model);
  return {root["module"][buffer].as_tensor().byte_offset(),
          root["frozen_param_fragments"][frozen].as_tensor().byte_offset()};
}

// A ZeRO-3 rank's model file whose pickle is rank 0's byte for byte (DeepSpeed's, as here) is read
// as rank 0's values, not decoded again; its frozen fragment and buffer must still be its own
// bytes. Then the same pickle with rank 1's buffer record moved 64 bytes on (a longer extra field
// in its local header): that rank is decoded on its own, and the index follows its record.
TEST(RankModelFiles, ARankWithRankZerosPickleKeepsItsOwnBytes) {
  const std::string d = copy_tag("z3_ws2_fp32_pg2");
  const std::string r0 = d + "/zero_pp_rank_0_mp_rank_00_model_states.pt",
                    r1 = d + "/zero_pp_rank_1_mp_rank_00_model_states.pt";
  ASSERT_EQ(pt::load_pt(r0)->pickle_hash, pt::load_pt(r1)->pickle_hash) << "the fixture no longer tests this";
  for (bool moved : {false, true}) {
    const auto probe_index = ds::index_tag(d);
    const ds::TagIndex& probe = *probe_index;
    ASSERT_EQ(probe.buffers.size(), 1u);
    ASSERT_EQ(probe.frozen.size(), 1u);
    const std::string buffer = probe.buffers[0].name, frozen = probe.frozen[0].name;
    if (moved) {
      auto pt = pt::load_pt(r1);
      const std::string key = ds::Field(pt->root, r1)["module"][buffer].as_tensor().record().key;
      const pt::ZipReader zip(pt->file);
      const uint64_t at = zip.find("data/" + key)->local_header + 28;  // the extra field's length
      std::string bytes = read_file(r1);
      const uint16_t extra = uint16_t(uint8_t(bytes[at]) | uint8_t(bytes[at + 1]) << 8) + 64;
      bytes[at] = char(extra & 0xFF);
      bytes[at + 1] = char(extra >> 8);
      write_file(r1, bytes);
    }
    const auto [buffer_at, frozen_at] = own_offsets(r1, buffer, frozen);
    const auto index = ds::index_tag(d);
    const ds::TagIndex& ix = *index;
    ASSERT_EQ(ix.rank_buffers.size(), 2u);
    const pt::Extent b = ix.rank_buffers[1][0].data.at(0), f = ix.frozen[0].data.at(1);
    EXPECT_EQ(ix.shards.at(b.file).path, r1);
    EXPECT_EQ(b.offset, buffer_at) << (moved ? "moved record" : "same record");
    EXPECT_EQ(ix.shards.at(f.file).path, r1);
    EXPECT_EQ(f.offset, frozen_at) << (moved ? "moved record" : "same record");
  }
}

}  // namespace
}  // namespace zm::test
