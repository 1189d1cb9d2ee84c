// TpPattern against Python's re.match, on every pattern the spec lists (§3.1: Megatron-DeepSpeed,
// both versions, GPTModel and GPTModelPipe), every pattern in the fixtures' model-state files
// (AutoTP's exact ones, AutoTP partition_config, AutoEP's expert patterns before and after the
// converter's re-save) and a few that exercise each supported feature.
//
// The table was generated once with /usr/bin/python3 (Python 3, `re` module) by a script that
// lists the patterns and names below and prints, for each pattern, "1" or "0" per name from
// `re.match(pattern, name) is not None`, with json.dumps for the literals. It is not regenerated
// at build time: the point is an independent oracle frozen at authoring time.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "zeromount/ds/tp_pattern.h"
#include "zeromount/pt/error.h"

namespace zm::test {
namespace {

const std::vector<std::string> kNames = {
    "1.bias",
    "1.input_layernorm.bias",
    "1.input_layernorm.weight",
    "1.mlp.dense_4h_to_h.bias",
    "1.mlp.dense_4h_to_h.weight",
    "1.mlp.dense_h_to_4h.bias",
    "1.mlp.dense_h_to_4h.weight",
    "1.post_attention_layernorm.bias",
    "1.post_attention_layernorm.weight",
    "1.self_attention.dense.bias",
    "1.self_attention.dense.weight",
    "1.self_attention.query_key_value.bias",
    "1.self_attention.query_key_value.weight",
    "1.weight",
    "2.bias",
    "3.bias",
    "3.weight",
    "4.bias",
    "4.weight",
    "12.weight",
    "12.weightX",
    "3Xweight",
    "3.mlp.dense_4h_to_h.weight",
    "0.word_embeddings.weight",
    "5.lm_head.weight",
    "embed_tokens.weight",
    "language_model.embedding.word_embeddings.weight",
    "language_model.encoder.final_layernorm.bias",
    "language_model.encoder.final_layernorm.weight",
    "language_model.encoder.layers.0.input_layernorm.bias",
    "language_model.encoder.layers.0.input_layernorm.weight",
    "language_model.encoder.layers.0.mlp.dense_4h_to_h.bias",
    "language_model.encoder.layers.0.mlp.dense_4h_to_h.weight",
    "language_model.encoder.layers.0.mlp.dense_h_to_4h.bias",
    "language_model.encoder.layers.0.mlp.dense_h_to_4h.weight",
    "language_model.encoder.layers.0.post_attention_layernorm.bias",
    "language_model.encoder.layers.0.post_attention_layernorm.weight",
    "language_model.encoder.layers.0.self_attention.dense.bias",
    "language_model.encoder.layers.0.self_attention.dense.weight",
    "language_model.encoder.layers.0.self_attention.query_key_value.weight",
    "language_model.encoder.layers.11.mlp.dense_h_to_4h.bias",
    "language_model.encoder.layers.x.input_layernorm.weight",
    "language_model.encoder.layersX0Xinput_layernorm.weight",
    "language_model.output_layer.weight",
    "layers.0.input_layernorm.bias",
    "layers.0.input_layernorm.weight",
    "layers.0.mlp.down_proj.bias",
    "layers.0.mlp.down_proj.weight",
    "layers.0.mlp.gate_up_proj.weight",
    "layers.0.mlp.up_proj.bias",
    "layers.0.mlp.up_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.o_proj.bias",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.self_attn.q_proj.bias",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.qkv_proj.bias",
    "layers.0.self_attn.qkv_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.1.self_attn.o_proj.weight",
    "layersX0Xmlp.down_proj.weight",
    "lm_head.weight",
    "lm_head.weight.extra",
    "lm_head_weight",
    "xlm_head.weight",
    "model.lm_head.weight",
    "model.layers.0.dense.weight",
    "model.layers.0.mlp.experts.w1",
    "model.layers.0.mlp.experts.w2",
    "model.layers.0.mlp.experts.w3",
    "model.layers.0.mlp.experts.w4",
    "model.layers.0.mlp.experts.w1.bias",
    "model.layers.0.mlp.router.gate.weight",
    "norm.bias",
    "norm.weight",
    "norm.bias.x",
    "norm_bias",
    "tied_modules.embed.weight",
    "tied_modules.embed.word_embeddings.weight",
    "tied_modules.embed.position_embeddings.weight",
    "tied_modulesXembedXword_embeddingsXweight",
    "a-b#c d",
    "abbbc",
    "ac",
    "abx",
    "xx",
    "weight",
    ".weight",
    "norm.bias\n",
    "lm_head.weight\n",
    "lm_head.weight\n\n",
    "1\n.weight",
    "ac\n",
    "",
};
// pattern, then one character per kNames entry: 1 = re.match(pattern, name) is not None.
const std::vector<std::pair<std::string, std::string>> kTable = {
    {"^embed_tokens\\.weight$",
     "0000000000000000000000000100000000000000000000000000000000000000000000000000000000000000000000"},
    {"^layers\\.0\\.input_layernorm\\.bias$",
     "0000000000000000000000000000000000000000000010000000000000000000000000000000000000000000000000"},
    {"^layers\\.0\\.input_layernorm\\.weight$",
     "0000000000000000000000000000000000000000000001000000000000000000000000000000000000000000000000"},
    {"^layers\\.0\\.mlp\\.down_proj\\.bias$",
     "0000000000000000000000000000000000000000000000100000000000000000000000000000000000000000000000"},
    {"^layers\\.0\\.mlp\\.down_proj\\.weight$",
     "0000000000000000000000000000000000000000000000010000000000000000000000000000000000000000000000"},
    {"^layers\\.0\\.mlp\\.gate_up_proj\\.weight$",
     "0000000000000000000000000000000000000000000000001000000000000000000000000000000000000000000000"},
    {"^layers\\.0\\.self_attn\\.o_proj\\.bias$",
     "0000000000000000000000000000000000000000000000000000100000000000000000000000000000000000000000"},
    {"^layers\\.0\\.self_attn\\.o_proj\\.weight$",
     "0000000000000000000000000000000000000000000000000000010000000000000000000000000000000000000000"},
    {"^layers\\.0\\.self_attn\\.qkv_proj\\.bias$",
     "0000000000000000000000000000000000000000000000000000000010000000000000000000000000000000000000"},
    {"^layers\\.0\\.self_attn\\.qkv_proj\\.weight$",
     "0000000000000000000000000000000000000000000000000000000001000000000000000000000000000000000000"},
    {"^lm_head\\.weight$",
     "0000000000000000000000000000000000000000000000000000000000000100000000000000000000000000010000"},
    {"^norm\\.bias$", "0000000000000000000000000000000000000000000000000000000000000000000000000100000000000000100000"},
    {"^norm\\.weight$",
     "0000000000000000000000000000000000000000000000000000000000000000000000000010000000000000000000"},
    {".*\\.[qkv]_proj\\.weight$",
     "0000000000000000000000000000000000000000000000000001000100100000000000000000000000000000000000"},
    {".*\\.down_proj\\.weight$",
     "0000000000000000000000000000000000000000000000010000000000001000000000000000000000000000000000"},
    {".*\\.gate_up_proj\\.weight$",
     "0000000000000000000000000000000000000000000000001000000000000000000000000000000000000000000000"},
    {".*\\.o_proj\\.weight$",
     "0000000000000000000000000000000000000000000000000000010000010000000000000000000000000000000000"},
    {".*\\.qkv_proj\\.weight$",
     "0000000000000000000000000000000000000000000000000000000001000000000000000000000000000000000000"},
    {".*\\.up_proj\\.weight$",
     "0000000000000000000000000000000000000000000000000010000000000000000000000000000000000000000000"},
    {".*lm_head\\.weight$",
     "0000000000000000000000001000000000000000000000000000000000000100110000000000000000000000010000"},
    {".*\\.experts\\.w[123]$",
     "0000000000000000000000000000000000000000000000000000000000000000000111000000000000000000000000"},
    {"\\.experts\\.w[123]$",
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"tied_modules.embed.word_embeddings.weight",
     "0000000000000000000000000000000000000000000000000000000000000000000000000000001010000000000000"},
    {"tied_modules.embed.position_embeddings.weight",
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000100000000000000"},
    {"tied_modules.embed.word_embeddings.norm.weight",
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"tied_modules.embed.word_embeddings.norm.bias",
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.word_embeddings.weight",
     "0000000000000000000000010000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.lm_head.weight",
     "0000000000000000000000001000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.input_layernorm.weight",
     "0010000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.input_layernorm.bias",
     "0100000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.post_attention_layernorm.weight",
     "0000000010000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.post_attention_layernorm.bias",
     "0000000100000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.self_attention.dense.bias",
     "0000000001000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.self_attention.dense.weight",
     "0000000000100000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.mlp.dense_4h_to_h.bias",
     "0001000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.mlp.dense_4h_to_h.weight",
     "0000100000000000000000100000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.mlp.dense_h_to_4h.weight",
     "0000001000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.mlp.dense_h_to_4h.bias",
     "0000010000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.weight", "0000000000000100101111000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"\\d+.bias", "1000000000000011010000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"language_model.embedding.word_embeddings.weight",
     "0000000000000000000000000010000000000000000000000000000000000000000000000000000000000000000000"},
    {"language_model.output_layer.weight",
     "0000000000000000000000000000000000000000000100000000000000000000000000000000000000000000000000"},
    {"language_model.embedding.position_embeddings.weight",
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.final_layernorm.weight",
     "0000000000000000000000000000100000000000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.final_layernorm.bias",
     "0000000000000000000000000001000000000000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.input_layernorm.weight",
     "0000000000000000000000000000001000000000001000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.input_layernorm.bias",
     "0000000000000000000000000000010000000000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.post_attention_layernorm.weight",
     "0000000000000000000000000000000000001000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.post_attention_layernorm.bias",
     "0000000000000000000000000000000000010000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.self_attention.dense.bias",
     "0000000000000000000000000000000000000100000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.self_attention.dense.weight",
     "0000000000000000000000000000000000000010000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.mlp.dense_4h_to_h.bias",
     "0000000000000000000000000000000100000000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.mlp.dense_4h_to_h.weight",
     "0000000000000000000000000000000010000000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.mlp.dense_h_to_4h.weight",
     "0000000000000000000000000000000000100000000000000000000000000000000000000000000000000000000000"},
    {"language_model.encoder.layers.\\d+.mlp.dense_h_to_4h.bias",
     "0000000000000000000000000000000001000000100000000000000000000000000000000000000000000000000000"},
    {"^a\\-b\\#c\\ d$",
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000001000000000000"},
    {"[^.]+\\.weight",
     "0000000000000100101110000100000000000000000000000000000000000110100000000010000000000000011100"},
    {"[0-9a-f]?x", "0000000000000000000000000000000000000000000000000000000000000000100000000000000000000100000000"},
    {"ab*c$", "0000000000000000000000000000000000000000000000000000000000000000000000000000000000110000000010"},
    {"x+", "0000000000000000000000000000000000000000000000000000000000000000100000000000000000000100000000"},
    {"^$", "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001"},
};

TEST(TpPattern, EqualsPythonReMatch) {
  for (const auto& [pattern, bits] : kTable) {
    ASSERT_EQ(bits.size(), kNames.size()) << pattern;
    const ds::TpPattern p(pattern);
    for (size_t k = 0; k < kNames.size(); ++k)
      EXPECT_EQ(p.match(kNames[k]), bits[k] == '1') << "re.match('" << pattern << "', '" << kNames[k] << "')";
  }
}

// Python: re.match('^.\\.w$', 'é.w') matches: `.` is one code point, not one byte.
TEST(TpPattern, MatchesByCodePoint) {
  EXPECT_TRUE(ds::TpPattern("^.\\.w$").match("\xc3\xa9.w"));
  EXPECT_FALSE(ds::TpPattern("^..\\.w$").match("\xc3\xa9.w"));
  EXPECT_TRUE(ds::TpPattern("^[\xc3\xa9x]+$").match("x\xc3\xa9x"));
  EXPECT_THROW(ds::TpPattern("\\d+").match("\xd9\xa3"), FormatError);  // ARABIC-INDIC DIGIT THREE: \d in Python
  EXPECT_THROW(ds::TpPattern("x").match("\xff"), FormatError);
}

std::string refusal(const std::string& pattern) {
  try {
    ds::TpPattern p(pattern);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(TpPattern, RefusesWhatItDoesNotImplement) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a|b", "'|'"},
      {"(ab)+", "'('"},
      {"a{2}", "'{'"},
      {"\\w+", "'\\w'"},
      {"\\s", "'\\s'"},
      {"\\bx", "'\\b'"},
      {"\\1", "'\\1'"},
      {"a*?", "lazy"},
      {"a++", "possessive"},
      {"*a", "nothing to repeat"},
      {"a^b", "'^' after the start"},
      {"a$b", "'$' before the end"},
      {"[abc", "unterminated"},
      {"[[a]", "'[' inside"},
      {"[z-a]", "reversed"},
      {"[\\d-z]", "range"},
      {"abc\\", "trailing"},
  };
  for (const auto& [pattern, feature] : cases) {
    const std::string msg = refusal(pattern);
    EXPECT_NE(msg.find("pattern '" + pattern + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(feature), std::string::npos) << pattern << ": " << msg;
  }
}

// A Thompson simulation stays linear where a backtracker would take exponential time.
TEST(TpPattern, NoBacktrackingBlowUp) {
  const ds::TpPattern p(".*.*.*.*.*.*.*.*.*.*.*.*x$");
  EXPECT_FALSE(p.match(std::string(2000, 'a')));
  EXPECT_TRUE(p.match(std::string(2000, 'a') + "x"));
}

}  // namespace
}  // namespace zm::test
