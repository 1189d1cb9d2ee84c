// The interpreter of transformers' conversion table (view/files/saved_layout.h) against the table's
// own examples: Mixtral's experts (conversion_mapping.py's commented entry: w1/w3 merged per expert,
// then concatenated on dim 1), Qwen2-MoE's through an alias (deepseek_v3), and hrm_text's Chunk,
// whose reverse concatenates two run-time tensors into one saved tensor.
#include <gtest/gtest.h>

#include "zeromount/view/files/saved_layout.h"

using namespace zm::view;

namespace {

std::vector<SavedTensor> layout(const std::string& config, const std::vector<RuntimeTensor>& rt) {
  Conversion c = choose_conversion(config);
  EXPECT_TRUE(c.saved()) << c.reason;
  return saved_layout(c, rt);
}

}  // namespace

TEST(SavedLayout, MixtralExpertsAreByteRangesOfThePackedTensor) {
  const int64_t E = 4, I = 96, H = 64;
  auto out = layout(R"({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"]})",
                    {{"model.layers.0.mlp.gate.weight", {E, H}},
                     {"model.layers.0.mlp.experts.gate_up_proj", {E, 2 * I, H}},
                     {"model.layers.0.mlp.experts.down_proj", {E, H, I}},
                     {"model.norm.weight", {H}}});
  ASSERT_EQ(out.size(), 1u + 2 * E + E + 1);
  EXPECT_EQ(out[0].name, "model.layers.0.block_sparse_moe.gate.weight");
  for (int64_t e = 0; e < E; ++e) {
    const SavedTensor& w1 = out[size_t(1 + e)];
    const SavedTensor& w3 = out[size_t(1 + E + e)];
    const SavedTensor& w2 = out[size_t(1 + 2 * E + e)];
    EXPECT_EQ(w1.name, "model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".w1.weight");
    EXPECT_EQ(w3.name, "model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".w3.weight");
    EXPECT_EQ(w2.name, "model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".w2.weight");
    EXPECT_EQ(w1.shape, (std::vector<int64_t>{I, H}));
    EXPECT_EQ(w2.shape, (std::vector<int64_t>{H, I}));
    ASSERT_EQ(w1.parts.size(), 1u);
    EXPECT_TRUE(w1.parts[0].contiguous() && w3.parts[0].contiguous() && w2.parts[0].contiguous());
    EXPECT_EQ(w1.parts[0].tensor, 1u);
    EXPECT_EQ(w1.parts[0].offset, e * 2 * I * H);          // the gate half of expert e
    EXPECT_EQ(w3.parts[0].offset, e * 2 * I * H + I * H);  // the up half
    EXPECT_EQ(w2.parts[0].offset, e * H * I);
  }
  EXPECT_EQ(out.back().name, "model.norm.weight");
}

TEST(SavedLayout, AliasOfQwen2MoeSplitsGateAndUp) {
  auto out = layout(R"({"model_type": "deepseek_v3"})", {{"model.layers.3.mlp.experts.gate_up_proj", {2, 8, 4}},
                                                         {"model.layers.3.mlp.experts.down_proj", {2, 4, 4}}});
  std::vector<std::string> names;
  for (const auto& t : out) names.push_back(t.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "model.layers.3.mlp.experts.0.gate_proj.weight", "model.layers.3.mlp.experts.1.gate_proj.weight",
                "model.layers.3.mlp.experts.0.up_proj.weight", "model.layers.3.mlp.experts.1.up_proj.weight",
                "model.layers.3.mlp.experts.0.down_proj.weight", "model.layers.3.mlp.experts.1.down_proj.weight"}));
  EXPECT_EQ(out[3].parts[0].offset, 32 + 16);
}

TEST(SavedLayout, ReversedChunkConcatenatesRunTimeTensors) {
  auto out = layout(R"({"model_type": "hrm_text"})",
                    {{"model.layers.0.mlp.gate_proj.weight", {3, 4}}, {"model.layers.0.mlp.up_proj.weight", {3, 4}}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "model.layers.0.mlp.gate_up_proj.weight");
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{6, 4}));
  ASSERT_EQ(out[0].parts.size(), 2u);
  EXPECT_EQ(out[0].parts[0].tensor, 0u);
  EXPECT_EQ(out[0].parts[1].tensor, 1u);
  EXPECT_EQ(out[0].cat_dim, 0);
}

TEST(SavedLayout, WhatKeepsRunTimeNames) {
  EXPECT_FALSE(choose_conversion("").saved());
  EXPECT_FALSE(choose_conversion("not json").saved());
  EXPECT_FALSE(choose_conversion(R"({"model_type": "llama"})").saved());
  Conversion vl = choose_conversion(R"({"model_type": "qwen3_vl_moe"})");
  EXPECT_FALSE(vl.saved());
  EXPECT_NE(vl.reason.find("check_dims"), std::string::npos) << vl.reason;
  // a composite model: its text_config is a sub-model the table knows
  EXPECT_FALSE(choose_conversion(R"({"model_type": "x", "text_config": {"model_type": "mixtral"}})").saved());
  // and one whose sub-models the table does not know: Llava's saved names come from an entry scoped
  // to its inner model (the Trainer saves language_model.model.*, the root entry alone gave
  // language_model.*: neither name), so it keeps the run-time names
  const Conversion llava = choose_conversion(
      R"({"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
          "text_config": {"model_type": "llama"}, "vision_config": {"model_type": "clip_vision_model"}})");
  EXPECT_FALSE(llava.saved());
  EXPECT_NE(llava.reason.find("text_config is a sub-model ('llama')"), std::string::npos) << llava.reason;
  EXPECT_EQ(conversions_version(), "5.12.1");
  // an unconverted run-time tensor keeps its name and is one whole view
  Conversion none = choose_conversion("");
  auto out = saved_layout(none, {{"a.weight", {2, 3}}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "a.weight");
  EXPECT_TRUE(out[0].parts[0].contiguous());
}
