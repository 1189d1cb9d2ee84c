#pragma once
// The layout save_pretrained writes (transformers 5): its conversion table, reversed. At run time a
// model's parameters may have other names and shapes than on disk (MoE experts packed into one 3-D
// parameter, renamed modules); DeepSpeed saves the run-time ones, and save_pretrained reverses the
// table (transformers' revert_weight_conversion). The table is data
// (data/transformers_conversions.json, made by scripts/transformers_conversions.py from
// transformers' own conversion_mapping.py), interpreted here for a small vocabulary: WeightRenaming,
// PrefixChange, WeightConverter with MergeModulelist, Concatenate, Chunk, Transpose.
//
// Each saved tensor is described as views of run-time tensors, never as bytes: one expert of a
// packed [E, ...] tensor, or the gate or up half of one, is a contiguous byte range; a transpose is
// a strided view, whose bytes the weights files compute on read.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zm::view {

// Elements of one run-time tensor seen through offsets and strides (in elements), as torch views are.
struct TensorView {
  size_t tensor = 0;  // position among the run-time tensors given to saved_layout()
  int64_t offset = 0;
  std::vector<int64_t> shape, strides;
  bool contiguous() const;
  uint64_t numel() const;
};

// One tensor as save_pretrained writes it: the concatenation of `parts` along `cat_dim` (one part
// unless a Chunk was reversed).
struct SavedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<TensorView> parts;
  int cat_dim = 0;
};

struct RuntimeTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// The table entry chosen for a run, or why none is used (then the run-time names are kept).
struct Conversion {
  std::string key;     // the table entry: a class name or a model type; empty when none applies
  std::string reason;  // why the run-time names are kept (empty when the saved layout is served)
  struct Rules;        // the reversed transforms (saved_layout.cpp)
  std::shared_ptr<const Rules> rules;
  bool saved() const { return rules != nullptr; }
};

// Which entry of the table a run's config.json asks for (class name in `architectures` first, then
// `model_type`, as get_model_conversion_mapping looks them up), or why none. `config_json` empty: no
// config.json. Throws nothing: a config that cannot be read keeps the run-time names, and says so.
Conversion choose_conversion(const std::string& config_json);
// The entry named `key` as it is, for tests and for `-o weights_names` diagnostics.
Conversion conversion_named(const std::string& key);
// The version of transformers the table was derived from.
const std::string& conversions_version();

// The run-time tensors as save_pretrained would write them, in order: each run-time tensor that no
// converter takes keeps its place (renamed); a converter's outputs come where its first input was.
// Throws zm::Error (EINVAL) when a tensor does not fit its converter (a chunk that does not divide).
std::vector<SavedTensor> saved_layout(const Conversion& c, const std::vector<RuntimeTensor>& runtime);

}  // namespace zm::view
