#include "zeromount/view/files/universal.h"

#include "zeromount/ds/optim_file.h"
#include "zeromount/ds/tp_param.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_writer.h"

namespace zm::view {

namespace build = pt::build;
using pt::Kind;
using pt::Node;

namespace {

pt::PtOptions stem(const MountedTag& t, const char* name) {
  pt::PtOptions o;
  o.prefix = name;  // as torch.save(obj, ".../<name>.pt") names the archive
  o.crc_source = t.crc_source;
  return o;
}

const Node* scalar_node(pt::Arena& a, const MountedTag& t, const ds::StepValue& s) {
  return ds::step_value_node(a, s, t.mapper());
}

// One rank's local state, in view file ids, for the computed merges.
std::vector<ds::RankBytes> rank_bytes(const MountedTag& t, const ds::Param& p, size_t state) {
  std::vector<ds::RankBytes> out;
  const uint64_t es = pt::element_size(t.index->master_dtype);
  for (const auto& s : p.slices) {
    const uint64_t n = pt::numel(s.shape);
    std::vector<pt::Extent> ext;
    ds::element_extents(s.stored.at(state), 0, n, es, ext);
    for (auto& e : ext) e = t.map(e);
    out.emplace_back(std::move(ext));
  }
  return out;
}

// SubparamShape as the converter pickles it: NEWOBJ of the dataclass, then BUILD with its fields
// (shape: the published list, with a tuple at partition_dim; spec §10.5).
const Node* subparam_shape_node(pt::Arena& a, const ds::SubParamRule& r) {
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

}  // namespace

void merged_bytes(const MountedTag& t, const ds::Param& p, size_t state, pt::Tensor& out) {
  const ds::TagIndex& ix = *t.index;
  const std::string what = p.name + " (" + ix.state_names[state] + ")";
  switch (p.rule) {
    case ds::TpRule::Averaged:
      out.append_computed(std::make_shared<ds::AveragedTensor>(rank_bytes(t, p, state), ix.master_dtype, what));
      return;
    case ds::TpRule::Replicated:
      out.append_computed(std::make_shared<ds::ReplicatedTensor>(rank_bytes(t, p, state), ix.master_dtype, what));
      return;
    case ds::TpRule::Expert:  // the EP ranks' local experts in turn, as a cat on dim 0
    case ds::TpRule::Cat:
      // A cat on dim 0 is each rank's bytes in turn: a few extents, nothing computed.
      if (p.cat_dim == 0) {
        const auto extents = ds::merged_extents(ix, p, state);
        for (const auto& e : *extents) out.data.push_back(t.map(e));
        return;
      }
      [[fallthrough]];
    default:
      out.append_computed(std::make_shared<ds::ConcatenatedTensor>(ds::tp_cat_of(ix, p), rank_bytes(t, p, state),
                                                                   ix.master_dtype, what));
  }
}

void append_param_bytes(pt::VirtualFile& f, const MountedTag& t, const ds::Param& p, size_t state) {
  if (!t.index->parallel()) {
    for (const auto& fr : t.index->fragments(p, state)) f.append_extent(t.map(fr.extent));
    return;
  }
  pt::Tensor x;
  merged_bytes(t, p, state, x);
  uint64_t left = p.numel * pt::element_size(t.index->master_dtype);  // a vocabulary cut is a prefix
  for (pt::Extent e : x.data) {
    if (left == 0) break;
    if (e.file == pt::kComputedBytes && e.length > left)
      throw Error(p.name + ": a computed merge with a vocabulary cut is not supported", EIO);
    e.length = std::min(e.length, left);
    left -= e.length;
    pt::append_piece(f, x, e);
  }
}

namespace {

// zero/<param>/<state>.pt of a parallel checkpoint: the keys merge_tp_slices writes (§10.1).
pt::VirtualFile parallel_state_file(const MountedTag& t, const ds::Param& p, size_t state) {
  const ds::TagIndex& ix = *t.index;
  pt::Arena a;
  pt::Tensor x;
  x.dtype = ix.master_dtype;
  x.shape = p.shape;
  x.write_storage_numel = p.merged_numel;             // the vocabulary cut keeps the padded storage (§10.3)
  x.requires_grad = ix.state_names[state] == "fp32";  // a clone of the fp32 partition (§10.2)
  merged_bytes(t, p, state, x);
  Node* tensor = a.make_tensor_node(std::move(x));
  Node* d = build::dict(a);
  if (p.rule == ds::TpRule::Expert) {  // autoep_universal.py writes 'param' first (§10.1)
    build::add(d, a, "param", tensor);
    build::add(d, a, "cat_dim", a.make_int(0));
    build::add(d, a, "is_expert_param", build::boolean(a, true));
    build::add(d, a, "ep_num_experts", a.make_int(p.ep_num_experts));
    return pt::build_pt(d, stem(t, ix.state_names[state].c_str()));
  }
  switch (p.rule) {
    case ds::TpRule::TwoSubParams:
      build::add(d, a, "cat_dim", a.make_int(0));
      build::add(d, a, "param_n_sub_params", a.make_int(2));
      break;
    case ds::TpRule::SubParams:
      build::add(d, a, "sub_param_shape", subparam_shape_node(a, ix.sub_param_rules.at(size_t(p.sub_rule))));
      break;
    case ds::TpRule::Cat:
      build::add(d, a, "cat_dim", a.make_int(p.cat_dim));
      break;
    default:
      break;
  }
  if (p.vocab) build::add(d, a, "vocab_tensor", build::boolean(a, true));
  build::add(d, a, "param", tensor);
  return pt::build_pt(d, stem(t, ix.state_names[state].c_str()));
}

}  // namespace

pt::VirtualFile param_state_file(const MountedTag& t, const ds::Param& p, size_t state, bool bare) {
  if (t.index->parallel()) return parallel_state_file(t, p, state);
  pt::Arena a;
  std::vector<pt::Extent> data;
  for (const auto& f : t.index->fragments(p, state)) data.push_back(t.map(f.extent));
  Node* tensor = build::tensor(a, t.index->master_dtype, p.shape, std::move(data));
  if (bare) return pt::build_pt(tensor, stem(t, t.index->state_names[state].c_str()));
  Node* d = build::dict(a);
  build::add(d, a, "cat_dim", a.make_int(0));
  build::add(d, a, "param", tensor);
  return pt::build_pt(d, stem(t, t.index->state_names[state].c_str()));
}

pt::VirtualFile scalar_file(const MountedTag& t, size_t group, size_t k) {
  pt::Arena a;
  const ds::TagIndex& ix = *t.index;
  return pt::build_pt(scalar_node(a, t, ix.scalars.at(group).at(k)), stem(t, ix.scalar_names.at(k).c_str()));
}

pt::VirtualFile optimizer_state_file(const MountedTag& t) {
  const ds::TagIndex& ix = *t.index;
  pt::Arena a;
  Node* root = build::dict(a);
  // The source's own optimizer-level keys (loss scaler, flags, zero_stage, ...) come first, as
  // ds_to_universal writes them; then what the other stage family's loader also needs.
  if (ix.optim_meta)
    for (const auto& [k, v] : ix.optim_meta->entries) root->entries.emplace_back(k, v);
  if (!root->get("ds_version"))
    build::add(root, a, "ds_version", a.make_str(ix.ds_version.empty() ? "0.0.0" : ix.ds_version));
  build::add(root, a, "param_groups", ix.param_groups);
  // Per (sub-)group: its per-group values, and 'step' (None when the optimizer keeps none) for the
  // ZeRO-3 universal loader, which reads state[0]['step']; {} when the source never stepped.
  Node* state = build::dict(a);
  for (size_t s = 0; s < ix.scalars.size() && ix.has_state(); ++s) {
    Node* entry = build::dict(a);
    for (size_t k = 0; k < ix.scalar_names.size(); ++k)
      if (ix.scalars[s][k].kind != ds::StepValue::None)  // a value this group keeps
        build::add(entry, a, ix.scalar_names[k].c_str(), scalar_node(a, t, ix.scalars[s][k]));
    if (!ix.step(s)) build::add(entry, a, "step", build::none(a));
    state->entries.emplace_back(a.make_int(int64_t(s)), entry);
  }
  Node* osd = build::dict(a);
  build::add(osd, a, "state", state);
  build::add(osd, a, "param_groups", ix.param_groups);
  build::add(root, a, "optimizer_state_dict", osd);
  return pt::build_pt(root, stem(t, "optimizer_state"));
}

}  // namespace zm::view
