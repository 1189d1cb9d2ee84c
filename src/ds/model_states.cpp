#include "model_states.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"

namespace zm::ds {

std::vector<ShapeList> read_param_shapes(const Field& root) {
  const Field shapes = root["param_shapes"];
  std::vector<ShapeList> out;
  for (size_t g = 0; g < shapes.size(); ++g) {
    ShapeList list;
    for (const auto& [name, shape] : shapes[g].items()) list.emplace_back(name, shape.as_shape());
    out.push_back(std::move(list));
  }
  return out;
}

void read_model_common(TagIndex& index, const OpenShard& model) {
  const Field root = model.root();
  if (auto v = root.find("ds_version"); v && v->is(pt::Kind::Str)) index.ds_version = v->as_str();
  const int64_t dp = root["dp_world_size"].as_int();
  if (dp > index.dp)  // the highest ranks' files are gone: name the first one missing
    throw FormatError(where(index.dir + "/" + optim_states_name(index.optim_prefix, index.dp, 0),
                            "missing: dp_world_size in " + model.name + " is " + std::to_string(dp)));
  if (dp != index.dp)
    root["dp_world_size"].fail("says " + std::to_string(dp) + " ranks, but the tag has " + std::to_string(index.dp) +
                               " optimizer files");
  // index.mp is what the file grid says (pp x tp; 1 for a data-parallel checkpoint).
  if (auto mp = root.find("mp_world_size"); mp && mp->as_int() != index.mp)
    mp->fail("says " + std::to_string(mp->as_int()) + " model-parallel ranks, the tag's files make " +
             std::to_string(index.mp));
  if (auto shared = root.find("shared_params"); shared && !shared->is_none())
    for (const auto& [alias, canon] : shared->items()) index.shared.emplace_back(alias, canon.as_str());
  auto names = root.find("buffer_names");
  auto module = root.find("module");
  if (names && !names->is_none() && module && !module->is_none()) {
    for (size_t k = 0; k < names->size(); ++k) {
      const std::string name = (*names)[k].as_str();
      const Field t = (*module)[name];
      const pt::Tensor& tensor = t.as_tensor();
      PlainTensor b{name, tensor.dtype, tensor.shape, {}};
      b.data.push_back(ShardSet::slice(t, model.id, 0, tensor.numel(), "buffer " + name));
      index.buffers.push_back(std::move(b));
    }
  }
}

namespace {

bool is_flat(const Field& v, uint64_t partition) {
  if (!v.is(pt::Kind::Tensor)) return false;
  const pt::Tensor& t = v.as_tensor();
  return t.shape.size() == 1 && uint64_t(t.shape[0]) == partition;
}

StepValue read_scalar(const Field& v, uint32_t shard) {
  StepValue s;
  if (v.is(pt::Kind::Tensor)) {
    const pt::Tensor& t = v.as_tensor();
    s.kind = StepValue::Tensor;
    s.dtype = t.dtype;
    s.shape = t.shape;
    s.extent = ShardSet::slice(v, shard, 0, t.numel(), "per-group optimizer value");
  } else if (v.is(pt::Kind::Int)) {
    s.kind = StepValue::Int;
    s.i = v.node()->i;
  } else if (v.is(pt::Kind::Float)) {
    s.kind = StepValue::Float;
    s.f = v.node()->f;
  } else {
    v.fail("unsupported per-group optimizer value " + pt::repr(v.node()) + " (a tensor, an int or a float is carried)");
  }
  return s;
}

}  // namespace

StateKeys split_state(const Field* state, uint64_t partition, bool muon) {
  StateKeys keys;
  if (!state) return keys;
  for (const auto& [k, v] : state->items()) {
    if (muon && k == "momentum_buffer" && v.is(pt::Kind::Tensor) && v.as_tensor().shape.size() == 1)
      keys.whole.push_back(k);
    else
      (is_flat(v, partition) ? keys.flat : keys.scalars).push_back(k);
  }
  return keys;
}

void adopt_state_keys(TagIndex& index, const std::vector<StateKeys>& groups, const Field& where) {
  index.state_names = {"fp32"};
  index.scalar_names.clear();
  index.whole_states.clear();
  auto add = [](std::vector<std::string>& names, const std::string& k) {
    const auto it = std::find(names.begin(), names.end(), k);
    if (it != names.end()) return size_t(it - names.begin());
    names.push_back(k);
    return names.size() - 1;
  };
  for (const auto& g : groups) {
    for (const auto* list : {&g.flat, &g.whole})
      for (const auto& k : *list) {
        if (k == "fp32") where.fail("an optimizer state key 'fp32' clashes with the master weights' name");
        const size_t at = add(index.state_names, k);
        index.whole_states.resize(index.state_names.size());
        index.whole_states[at] = list == &g.whole;
      }
    for (const auto& k : g.scalars) add(index.scalar_names, k);
  }
  if (std::none_of(index.whole_states.begin(), index.whole_states.end(), [](bool w) { return w; }))
    index.whole_states.clear();
  // A key partitioned in one group and a scalar in another is not a layout DeepSpeed writes.
  for (const auto& k : index.scalar_names)
    if (std::find(index.state_names.begin(), index.state_names.end(), k) != index.state_names.end())
      where.fail("optimizer state key '" + k +
                 "' is a partitioned tensor in one param group, a per-group value in another");
  index.group_states.clear();
  if (std::all_of(groups.begin(), groups.end(), [&](const StateKeys& g) { return g == groups.front(); })) return;
  for (const auto& g : groups) {
    std::vector<bool>& holds = index.group_states.emplace_back(index.state_names.size(), false);
    holds[0] = true;
    for (size_t k = 1; k < index.state_names.size(); ++k)
      holds[k] = std::count(g.flat.begin(), g.flat.end(), index.state_names[k]) ||
                 std::count(g.whole.begin(), g.whole.end(), index.state_names[k]);
  }
}

void check_state_keys(const TagIndex& index, const StateKeys& want, const StateKeys& got, const Field* state,
                      const Field& where, uint64_t partition) {
  if (got == want) return;
  // Name the key that rank 0 partitions and this group does not, and why.
  for (size_t k = 0; k < want.flat.size() && state; ++k) {
    const auto v = state->find(want.flat[k]);
    if (!v || is_flat(*v, partition)) continue;
    if (v->is(pt::Kind::Tensor)) require_dtype(*v, index.master_dtype, "the master weights");
    v->fail("is " + pt::repr(v->node()) + ", where rank 0 has a 1-D tensor of the flat partition's length (" +
            std::to_string(partition) + " here)");
  }
  where.fail("optimizer state keys differ from rank 0's");
}

std::vector<StepValue> read_scalars(const TagIndex& index, const Field* state, uint32_t shard) {
  std::vector<StepValue> out;
  if (!state) return out;
  for (const auto& name : index.scalar_names) {
    const auto v = state->find(name);
    out.push_back(v ? read_scalar(*v, shard) : StepValue{});
  }
  return out;
}

namespace {

// The names the index holds (parameters, buffers, tied aliases), for one membership test per
// module entry: a scan of the parameters per entry made a ZeRO-2 index O(params^2).
std::unordered_set<std::string_view> listed_names(const TagIndex& index) {
  std::unordered_set<std::string_view> names;
  for (const auto& p : index.params) names.insert(p.name);
  for (const auto& b : index.buffers) names.insert(b.name);
  for (const auto& [alias, canon] : index.shared) names.insert(alias);
  return names;
}

PlainTensor whole_tensor(const Field& t, uint32_t shard, const std::string& name, const std::string& what) {
  const pt::Tensor& tensor = t.as_tensor();
  PlainTensor w{name, tensor.dtype, tensor.shape, {}};
  w.data.push_back(ShardSet::slice(t, shard, 0, tensor.numel(), what + " " + name));
  return w;
}

}  // namespace

void read_module(TagIndex& index, const OpenShard& model, bool full_weights, const std::set<std::string>& elsewhere) {
  index.module_dtype = index.master_dtype;
  const auto module = model.root().find("module");
  if (!module || module->is_none()) return;  // nothing says otherwise: training ran in master precision
  const Param* first = nullptr;
  for (const auto& p : index.params)
    if (!first && !elsewhere.count(p.name)) first = &p;
  if (!first) return;
  index.module_dtype = (*module)[first->name].as_tensor().dtype;
  for (const auto& p : index.params) {
    if (elsewhere.count(p.name)) {
      if (full_weights) index.module_weights.push_back(PlainTensor{p.name, index.module_dtype, p.shape, {}});
      continue;
    }
    const Field t = (*module)[p.name];
    require_dtype(t, index.module_dtype, "the module weights of " + first->name);
    if (!full_weights) continue;  // stage 3 saves [0]-shaped placeholders
    if (t.as_tensor().shape != p.shape) t.fail("module weight shape differs from param_shapes");
    index.module_weights.push_back(whole_tensor(t, model.id, p.name, "module weight"));
  }
  if (!full_weights) return;
  const auto listed = listed_names(index);
  for (const auto& [name, t] : module->items())
    if (!listed.count(name)) index.module_frozen.push_back(whole_tensor(t, model.id, name, "frozen parameter"));
}

std::vector<size_t> module_order(const TagIndex& index) {
  std::unordered_map<std::string_view, size_t> at;
  for (size_t k = 0; k < index.params.size(); ++k) at.emplace(index.params[k].name, k);
  std::vector<size_t> order;
  std::vector<bool> placed(index.params.size());
  if (!index.model_files.empty()) {
    const auto model = pt::load_pt(index.model_files.front());
    if (const pt::Node* module = model->root ? model->root->get("module") : nullptr)
      for (const auto& [key, value] : module->entries)
        if (auto it = key && key->is(pt::Kind::Str) ? at.find(key->s) : at.end();
            it != at.end() && !placed[it->second]) {
          placed[it->second] = true;
          order.push_back(it->second);
        }
  }
  for (size_t k = 0; k < index.params.size(); ++k)
    if (!placed[k]) order.push_back(k);
  return order;
}

}  // namespace zm::ds
