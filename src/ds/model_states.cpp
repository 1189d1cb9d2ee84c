#include "model_states.h"
#include "zeromount/ds/shard_names.h"

#include "zeromount/pt/error.h"

namespace zm::ds {

uint64_t numel_of(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) throw FormatError("shape numel overflows");
  return n;
}

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

StepValue read_group_step(const Field& state, uint32_t shard) {
  StepValue s;
  const auto found = state.find("step");
  if (!found) return s;
  const Field& step = *found;
  if (step.is(pt::Kind::Tensor)) {
    const pt::Tensor& t = step.as_tensor();
    if (t.numel() != 1) step.fail("step tensor has " + std::to_string(t.numel()) + " elements");
    s.kind = StepValue::Tensor;
    s.dtype = t.dtype;
    s.extent = ShardSet::slice(step, shard, 0, 1, "step");
  } else if (step.is(pt::Kind::Int)) {
    s.kind = StepValue::Int;
    s.i = step.node()->i;
  } else if (step.is(pt::Kind::Float)) {
    s.kind = StepValue::Float;
    s.f = step.node()->f;
  } else {
    step.fail("unsupported step value " + pt::repr(step.node()));
  }
  return s;
}

std::vector<std::string> state_keys(const Field& state) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : state.items())
    if (k != "step") keys.push_back(k);
  return keys;
}

}  // namespace zm::ds

namespace zm::ds {

namespace {

bool is_listed(const TagIndex& index, const std::string& name) {
  if (index.find(name)) return true;
  for (const auto& b : index.buffers)
    if (b.name == name) return true;
  for (const auto& [alias, canon] : index.shared)
    if (alias == name) return true;
  return false;
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
  for (const auto& [name, t] : module->items())
    if (!is_listed(index, name)) index.module_frozen.push_back(whole_tensor(t, model.id, name, "frozen parameter"));
}

}  // namespace zm::ds
