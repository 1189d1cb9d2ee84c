#include "zeromount/view/universal.h"

#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_writer.h"

namespace zm::view {

using pt::Kind;
using pt::Node;

namespace {

pt::PtOptions stem(const char* name) {
  pt::PtOptions o;
  o.prefix = name;  // as torch.save(obj, ".../<name>.pt") names the archive
  return o;
}

Node* tensor_node(pt::Arena& a, pt::DType dtype, std::vector<int64_t> shape, std::vector<pt::Extent> data) {
  pt::Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return a.make_tensor_node(std::move(t));
}

const Node* step_node(pt::Arena& a, const MountedTag& t, const ds::StepValue& s) {
  switch (s.kind) {
    case ds::StepValue::Tensor:
      return tensor_node(a, s.dtype, {}, {t.map(s.extent)});
    case ds::StepValue::Int:
      return a.make_int(s.i);
    case ds::StepValue::Float: {
      Node* n = a.make(Kind::Float);
      n->f = s.f;
      return n;
    }
    case ds::StepValue::None:
      break;
  }
  return a.make(Kind::None);
}

void set(Node* dict, pt::Arena& a, const char* key, const Node* value) {
  dict->entries.emplace_back(a.make_str(key), value);
}

}  // namespace

pt::VirtualFile param_state_file(const MountedTag& t, const ds::Param& p, size_t state, bool bare) {
  pt::Arena a;
  std::vector<pt::Extent> data;
  for (const auto& f : t.index->fragments(p, state)) data.push_back(t.map(f.extent));
  Node* tensor = tensor_node(a, t.index->master_dtype, p.shape, std::move(data));
  if (bare) return pt::build_pt(tensor, stem(t.index->state_names[state].c_str()));
  Node* d = a.make(Kind::Dict);
  set(d, a, "cat_dim", a.make_int(0));
  set(d, a, "param", tensor);
  return pt::build_pt(d, stem(t.index->state_names[state].c_str()));
}

pt::VirtualFile step_file(const MountedTag& t, const ds::StepValue& step) {
  pt::Arena a;
  return pt::build_pt(step_node(a, t, step), stem("step"));
}

pt::VirtualFile optimizer_state_file(const MountedTag& t) {
  const ds::TagIndex& ix = *t.index;
  pt::Arena a;
  Node* root = a.make(Kind::Dict);
  // The source's own optimizer-level keys (loss scaler, flags, zero_stage, ...) come first, as
  // ds_to_universal writes them; then what the other stage family's loader also needs.
  if (ix.optim_meta)
    for (const auto& [k, v] : ix.optim_meta->entries) root->entries.emplace_back(k, v);
  if (!root->get("ds_version")) set(root, a, "ds_version", a.make_str(ix.ds_version.empty() ? "0.0.0" : ix.ds_version));
  set(root, a, "param_groups", ix.param_groups);
  Node* state = a.make(Kind::Dict);
  for (size_t s = 0; s < ix.steps.size(); ++s) {
    Node* entry = a.make(Kind::Dict);
    set(entry, a, "step", step_node(a, t, ix.steps[s]));
    state->entries.emplace_back(a.make_int(int64_t(s)), entry);
  }
  Node* osd = a.make(Kind::Dict);
  set(osd, a, "state", state);
  set(osd, a, "param_groups", ix.param_groups);
  set(root, a, "optimizer_state_dict", osd);
  return pt::build_pt(root, stem("optimizer_state"));
}

}  // namespace zm::view
