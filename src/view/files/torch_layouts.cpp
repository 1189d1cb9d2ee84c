#include "zeromount/view/files/torch_layouts.h"

#include "zeromount/ds/optim_file.h"
#include "zeromount/ds/state_bytes.h"
#include "zeromount/ds/torch_state.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/view/files/dcp_files.h"
#include "zeromount/view/files/weights.h"

namespace zm::view {

namespace build = pt::build;
using pt::Node;

std::optional<TorchLayout> parse_torch_layout(std::string_view name) {
  if (name == "torch") return TorchLayout{};
  constexpr std::string_view kFsdp = "fsdp-dp";
  if (!name.starts_with(kFsdp)) return std::nullopt;
  const std::string_view w = name.substr(kFsdp.size());
  if (w.empty() || w.size() > 5 || w[0] == '0') return std::nullopt;
  int v = 0;
  for (char c : w) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > 65536) return std::nullopt;
  return TorchLayout{v};
}

bool torch_layout_keeps(const Inode& real) {
  static const char* kMade[] = {
      "latest",       "zero_to_fp32.py",      "model.safetensors", "model.safetensors.index.json",
      "optimizer.pt", "pytorch_model_fsdp_0", "optimizer_0"};
  for (const char* m : kMade)
    if (real.name == m) return false;
  return !(real.name.starts_with("model-") && real.name.ends_with(".safetensors"));
}

void add_torch_layout(Tree& tree, uint64_t dir, const MountedTag& t, TorchLayout layout, uint64_t max_shard_bytes,
                      const std::shared_ptr<const DcpPlans>& plans, struct timespec mtime) {
  if (layout.fsdp_world > 0) {  // Accelerate's save_fsdp_model / save_fsdp_optimizer, SHARDED_STATE_DICT
    DcpShape model, optimizer;
    model.world = optimizer.world = layout.fsdp_world;
    model.optimizer = false;
    optimizer.model = false;
    tree.set_lazy(tree.add_dir(dir, "pytorch_model_fsdp_0", mtime), make_dcp_dir(plans, t, model, mtime));
    if (t.index->optimizer_saved)  // a model-only save has none to give
      tree.set_lazy(tree.add_dir(dir, "optimizer_0", mtime), make_dcp_dir(plans, t, optimizer, mtime));
    return;
  }
  const MountedTag* tag = &t;
  auto plan = std::make_shared<const WeightShards>(plan_weights(t, Weights::Master, max_shard_bytes));
  for (size_t k = 0; k < plan->files.size(); ++k)
    tree.add_file(dir, plan->files[k], mtime,
                  [tag, plan, k] { return weights_file(*tag, Weights::Master, plan->tensors[k]); });
  if (plan->sharded()) {
    const std::string index = weights_index(*plan);
    tree.add_file(
        dir, "model.safetensors.index.json", mtime, [index] { return pt::VirtualFile::from_text(index); },
        index.size());
  }
  if (t.index->optimizer_saved) tree.add_file(dir, "optimizer.pt", mtime, [tag] { return torch_optimizer_file(*tag); });
}

pt::VirtualFile torch_optimizer_file(const MountedTag& t) {
  const ds::TagIndex& ix = *t.index;
  const auto groups = ds::torch_groups(ix);
  const ds::ExtentMap map = t.mapper();
  pt::Arena a;
  Node* state = build::dict(a);
  Node* param_groups = build::list(a, {});
  int64_t next = 0;  // torch numbers parameters across groups, in order
  for (const ds::TorchGroup& g : groups) {
    Node* group = build::dict(a);
    for (const auto& [name, value] : g.hypers) build::add(group, a, name, value);
    std::vector<int64_t> ids;
    for (uint32_t p : g.params) {
      const ds::Param& param = ix.params[p];
      const int64_t id = next++;
      ids.push_back(id);
      if (!ix.has_state()) continue;  // before its first step a torch optimizer's state is {}
      Node* s = build::dict(a);
      for (size_t k = 0; k < ix.scalar_names.size(); ++k)  // 'step' first, as torch's Adam
        if (const ds::StepValue* v = ix.value(param.step, k))
          build::add(s, a, ix.scalar_names[k], ds::step_value_node(a, *v, map));
      for (size_t k = 1; k < ix.state_names.size(); ++k) {
        if (!ix.has(param, k)) continue;  // a Muon group keeps momentum_buffer, the other Adam's moments
        pt::VirtualFile whole;
        ds::state_bytes(*t.index, param, k, map, whole);
        build::add(s, a, ix.state_names[k], build::tensor(a, ix.master_dtype, param.shape, std::move(whole)));
      }
      state->entries.emplace_back(a.make_int(id), s);
    }
    build::add(group, a, "params", build::int_list(a, ids));
    param_groups->items.push_back(group);
  }
  Node* root = build::dict(a);
  build::add(root, a, "state", state);
  build::add(root, a, "param_groups", param_groups);
  return pt::build_pt(root, t.pt_options("optimizer"));
}

}  // namespace zm::view
