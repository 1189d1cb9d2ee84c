// DCP folders as a training state (ds/dcp_source.h): real FSDP2 saves by torch 2.14 in every style
// read as the run their README describes (the DeepSpeed fixtures' TinyModel, groups and AdamW),
// and what cannot be shown refused with the key named. The values themselves are checked against
// the run's live state by tests/py/test_dcp_sources.py.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/dcp_source.h"
#include "zeromount/ds/model_root.h"
#include "zeromount/ds/sources.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/dcp.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/file.h"
#include "zeromount/pt/pt_writer.h"

namespace zm::ds {
namespace {

const std::string kDcp = std::string(ZM_FIXTURES) + "/dcp/";

std::string tag_dir(const std::string& fixture) {
  return kDcp + fixture + "/checkpoint/" + (fixture.starts_with("hf_") ? "checkpoint-3" : "step-3");
}

std::vector<std::string> names(const TagIndex& ix, int group) {
  std::vector<std::string> out;
  for (const Param& p : ix.params)
    if (p.group == group) out.push_back(p.name);
  return out;
}

// Weight decay on every *.weight but norm.weight (README of shared/fixtures/dcp), in the model's order.
const std::vector<std::string> kDecayed = {"embed.weight", "fc1.weight", "fc2.weight", "head.weight"};
const std::vector<std::string> kNotDecayed = {"fc1.bias", "norm.weight", "norm.bias", "fc2.bias", "head.bias"};

class EveryStyle : public testing::TestWithParam<const char*> {};

TEST_P(EveryStyle, ReadsAsTheRunThatSavedIt) {
  const std::string fixture = GetParam();
  const int world = fixture.find("ws3") != std::string::npos ? 3 : 2;
  ASSERT_TRUE(reader_of(open_dir(tag_dir(fixture))));
  EXPECT_EQ(reader_of(open_dir(tag_dir(fixture)))->name, "dcp");
  const auto ix = index_tag(tag_dir(fixture));
  EXPECT_EQ(ix->source, SourceKind::Dcp);
  EXPECT_EQ(ix->dp, world);
  EXPECT_EQ(ix->master_dtype, pt::DType::F32) << "bf16-mixed saves its fp32 shards";
  if (fixture.ends_with("model_only")) {
    EXPECT_FALSE(ix->optimizer_saved);
    EXPECT_EQ(ix->source_style, "model-only");
    EXPECT_EQ(ix->params.size(), 11u) << "every model key, buffers and the frozen parameter too";
    EXPECT_EQ(ix->state_names, std::vector<std::string>{"fp32"});
    EXPECT_FALSE(model_root(*ix)) << "no optimizer state to lay out";
    EXPECT_NE(native_layout_refusal(*ix), "");
    return;
  }
  EXPECT_EQ(ix->source_style, fixture.starts_with("hf_")          ? "hf-fsdp"
                              : fixture.starts_with("torchtitan") ? "torchtitan"
                                                                  : "fsdp2");
  ASSERT_EQ(ix->num_groups, 2);
  EXPECT_EQ(names(*ix, 0), kDecayed);
  EXPECT_EQ(names(*ix, 1), kNotDecayed);
  EXPECT_EQ(ix->state_names, (std::vector<std::string>{"fp32", "exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(ix->scalar_names, std::vector<std::string>{"step"});
  // frozen_scale is cut into chunks as FSDP2 shards a parameter; running_mean is saved whole.
  ASSERT_EQ(ix->buffers.size(), 1u);
  EXPECT_EQ(ix->buffers[0].name, "running_mean");
  ASSERT_EQ(ix->frozen.size(), 1u);
  EXPECT_EQ(ix->frozen[0].name, "frozen_scale");
  EXPECT_EQ(ix->module_frozen.size(), 1u);
  // The model-state pickle DeepSpeed would have written, made up from the index.
  const auto root = model_root(*ix);
  ASSERT_TRUE(root);
  EXPECT_EQ(root->get("global_steps")->i, 3);
  EXPECT_EQ(root->get("dp_world_size")->i, world);
  EXPECT_EQ(root->get("ds_version")->s, kMadeDsVersion);
  EXPECT_EQ(root->get("lr_scheduler")->get("last_batch_iteration")->i, 2) << "WarmupLR after 3 steps";
  // torchtitan saves its scheduler (LambdaLR, last_epoch 3); the others ran without one.
  EXPECT_EQ(root->get("lr_scheduler")->get("last_epoch") != nullptr, fixture.starts_with("torchtitan"));
  EXPECT_EQ(root->get("module")->entries.size(), 11u);
  EXPECT_EQ(native_layout_refusal(*ix), "");
  // Each state of each parameter is its chunks, one per rank that has rows, covering it once.
  for (const Param& p : ix->params)
    for (size_t k = 0; k < ix->state_names.size(); ++k) {
      const auto frags = ix->fragments(p, k);
      uint64_t next = 0;
      for (const Fragment& f : frags) {
        EXPECT_EQ(f.start, next) << p.name;
        EXPECT_EQ(f.extent.length, f.numel * 4) << p.name;
        next += f.numel;
      }
      EXPECT_EQ(next, p.numel) << p.name;
      EXPECT_EQ(frags.size(), size_t(std::min<int64_t>(p.shape[0], world))) << p.name;
    }
  // One step per group, 3.0 after three steps, read where the index says it is.
  for (size_t g = 0; g < 2; ++g) {
    const StepValue& s = ix->scalars.at(g).at(0);
    ASSERT_EQ(s.kind, StepValue::Tensor);
    float v = 0;
    pt::File(ix->shards.at(s.extent.file).path).read_exact(s.extent.offset, &v, 4, "step");
    EXPECT_EQ(v, 3.0f);
  }
  // Hyper-parameters come from the save: lr 1e-2, betas (0.9, 0.99) as a tuple or list.
  ASSERT_TRUE(ix->param_groups && ix->param_groups->items.size() == 2);
  const pt::Node* lr = ix->param_groups->items[0]->get("lr");
  ASSERT_TRUE(lr && lr->is(pt::Kind::Float));
  EXPECT_EQ(lr->f, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(DcpSource, EveryStyle,
                         testing::Values("fsdp2_ws2_fp32", "fsdp2_ws3_fp32", "torchtitan_ws2_fp32", "hf_fsdp_ws2_fp32",
                                         "fsdp2_ws2_bf16mixed", "fsdp2_ws2_model_only"));

class NoFiles final : public pt::ExtentReader {
 public:
  void pread(uint32_t, uint64_t, void*, size_t) const override { throw std::runtime_error("no file is read"); }
};

// A folder whose one tensor is cut into column halves: a 2-D mesh's Shard(1), not FSDP2's rows.
TEST(DcpSource, ChunksCutAtAnotherDimAreRefusedWithTheKeyNamed) {
  const std::string dir = test::temp_dir() + "/step-1";
  std::filesystem::create_directories(dir);
  std::string data;
  std::vector<pt::dcp::Chunk> chunks;
  for (int64_t half = 0; half < 2; ++half) {
    pt::Arena a;
    pt::VirtualFile bytes;
    bytes.append_inline(std::string(2 * 2 * 4, char(half)));
    const NoFiles none;
    const std::string item =
        test::read_all(pt::build_pt(pt::build::tensor(a, pt::DType::F32, {2, 2}, std::move(bytes))), none);
    chunks.push_back({{0, 2 * half}, {2, 2}, 0, data.size(), item.size()});
    data += item;
  }
  pt::dcp::Item w{"model.w", {std::string("model"), std::string("w")}, true, pt::DType::F32, {2, 4}, chunks};
  test::write_file(dir + "/.metadata", pt::dcp::metadata({w}, {"__0_0.distcp"}));
  test::write_file(dir + "/__0_0.distcp", data);
  try {
    index_tag(dir);
    FAIL() << "a column cut was read as rows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 'model.w'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cut at dim 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zm::ds
