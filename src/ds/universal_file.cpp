#include "zeromount/ds/universal_file.h"

#include <string>
#include <utility>
#include <vector>

#include "zeromount/ds/model_root.h"
#include "zeromount/ds/optim_file.h"
#include "zeromount/pt/build.h"

namespace zm::ds {

namespace build = pt::build;
using pt::Node;

namespace {

// SubparamShape as the converter pickles it: NEWOBJ of the dataclass, then BUILD with its fields
// (shape: the published list, with a tuple at partition_dim; [tp §10.5]).
const Node* subparam_shape_node(pt::Arena& a, const SubParamRule& r) {
  Node* shape = build::list(a, {});
  for (size_t k = 0; k < r.shape.size(); ++k) {
    if (!r.is_tuple[k]) {
      shape->items.push_back(a.make_int(r.shape[k].at(0)));
      continue;
    }
    std::vector<const Node*> dims;
    for (int64_t v : r.shape[k]) dims.push_back(a.make_int(v));
    shape->items.push_back(build::tuple(a, std::move(dims)));
  }
  Node* st = build::dict(a);
  build::add(st, a, "patterns", build::str_list(a, r.patterns));
  build::add(st, a, "shape", shape);
  build::add(st, a, "partition_dim", a.make_int(r.partition_dim));
  return build::new_object(a, "deepspeed.checkpoint.universal_checkpoint", "SubparamShape", st);
}

// zero/<param>/<state>.pt of a parallel checkpoint: the keys merge_tp_slices writes [tp §10.1].
const Node* parallel_state_pickle(pt::Arena& a, const TagIndex& ix, const Param& p, size_t state,
                                  const ExtentMap& map) {
  pt::Tensor x;
  x.dtype = ix.master_dtype;
  x.shape = p.shape;
  x.made().storage_numel = p.merged_numel;            // the vocabulary cut keeps the padded storage [tp §10.3]
  x.requires_grad = ix.state_names[state] == "fp32";  // a clone of the fp32 partition [tp §10.2]
  state_bytes(ix, p, state, map, x);
  Node* tensor = a.make_tensor_node(std::move(x));
  Node* d = build::dict(a);
  if (p.rule == TpRule::Expert) {  // autoep_universal.py writes 'param' first [tp §10.1]
    build::add(d, a, "param", tensor);
    build::add(d, a, "cat_dim", a.make_int(0));
    build::add(d, a, "is_expert_param", build::boolean(a, true));
    build::add(d, a, "ep_num_experts", a.make_int(p.ep_num_experts));
    return d;
  }
  switch (p.rule) {
    case TpRule::TwoSubParams:
      build::add(d, a, "cat_dim", a.make_int(0));
      build::add(d, a, "param_n_sub_params", a.make_int(2));
      break;
    case TpRule::SubParams:
      build::add(d, a, "sub_param_shape", subparam_shape_node(a, ix.sub_param_rules.at(size_t(p.sub_rule))));
      break;
    case TpRule::Cat:
      build::add(d, a, "cat_dim", a.make_int(p.cat_dim));
      break;
    default:
      break;
  }
  if (p.vocab) build::add(d, a, "vocab_tensor", build::boolean(a, true));
  build::add(d, a, "param", tensor);
  return d;
}

}  // namespace

const Node* param_state_pickle(pt::Arena& a, const TagIndex& ix, const Param& p, size_t state, bool bare,
                               const ExtentMap& map) {
  if (ix.parallel()) return parallel_state_pickle(a, ix, p, state, map);
  pt::Tensor x;
  x.dtype = ix.master_dtype;
  x.shape = p.shape;
  state_bytes(ix, p, state, map, x);
  Node* tensor = a.make_tensor_node(std::move(x));
  if (bare) return tensor;
  Node* d = build::dict(a);
  build::add(d, a, "cat_dim", a.make_int(0));
  build::add(d, a, "param", tensor);
  return d;
}

const Node* optimizer_state_pickle(pt::Arena& a, const TagIndex& ix, const ExtentMap& map) {
  Node* root = build::dict(a);
  // The source's own optimizer-level keys (loss scaler, flags, zero_stage, ...) come first, as
  // ds_to_universal writes them; then what the other stage family's loader also needs.
  if (ix.optim_meta)
    for (const auto& [k, v] : ix.optim_meta->entries) root->entries.emplace_back(k, v);
  if (!root->get("ds_version")) build::add(root, a, "ds_version", a.make_str(written_ds_version(ix)));
  build::add(root, a, "param_groups", ix.param_groups);
  // Per (sub-)group: its per-group values, and 'step' (None when the optimizer keeps none) for the
  // ZeRO-3 universal loader, which reads state[0]['step']; {} when the source never stepped.
  Node* state = build::dict(a);
  for (size_t s = 0; s < ix.scalars.size() && ix.has_state(); ++s) {
    Node* entry = build::dict(a);
    for (size_t k = 0; k < ix.scalar_names.size(); ++k)
      if (const StepValue* v = ix.value(int64_t(s), k))
        build::add(entry, a, ix.scalar_names[k].c_str(), step_value_node(a, *v, map));
    if (!ix.step(s)) build::add(entry, a, "step", build::none(a));
    state->entries.emplace_back(a.make_int(int64_t(s)), entry);
  }
  Node* osd = build::dict(a);
  build::add(osd, a, "state", state);
  build::add(osd, a, "param_groups", ix.param_groups);
  build::add(root, a, "optimizer_state_dict", osd);
  return root;
}

std::vector<UniversalParamFile> universal_param_files(const TagIndex& ix, const Param& p) {
  std::vector<UniversalParamFile> out;
  for (size_t k = 0; k < ix.state_names.size(); ++k)
    if (ix.has(p, k)) out.push_back({UniversalParamFile::State, k});
  if (ix.parallel() && ix.stage == 3) return out;  // as the converter [tp §6]
  for (size_t k = 0; k < ix.scalar_names.size(); ++k)
    if (ix.value(p.step, k)) out.push_back({UniversalParamFile::Value, k});
  return out;
}

std::string universal_file_name(const TagIndex& ix, const UniversalParamFile& f) {
  return (f.kind == UniversalParamFile::State ? ix.state_names.at(f.k) : ix.scalar_names.at(f.k)) + ".pt";
}

}  // namespace zm::ds
