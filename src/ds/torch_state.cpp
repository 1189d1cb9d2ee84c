#include "zeromount/ds/torch_state.h"

#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

std::vector<TorchGroup> torch_groups(const TagIndex& ix) {
  if (const std::string why = torch_state_refusal(ix); !why.empty()) throw Error(ix.dir + ": " + why, ENOTSUP);
  const auto order = group_param_order(ix, source_options(ix));
  std::vector<TorchGroup> out(order.size());
  for (size_t g = 0; g < order.size(); ++g) {
    out[g].params = order[g];
    const pt::Node* group = ix.param_groups && g < ix.param_groups->items.size() ? ix.param_groups->items[g] : nullptr;
    if (group && group->kind == pt::Kind::Dict)
      for (const auto& [k, v] : group->entries)
        if (k->kind == pt::Kind::Str && k->s != "params") out[g].hypers.emplace_back(k->s, v);
  }
  return out;
}

std::string torch_state_refusal(const TagIndex& ix) {
  if (ix.pp > 1)
    return "a pipeline-parallel source: its layers are named by stage, not by the module's names (load "
           "<T>_universal/ with DeepSpeed instead)";
  if (ix.autoep())
    return "an AutoEP source: its experts' names are not the module's (load <T>_universal/ with DeepSpeed instead)";
  return "";
}

}  // namespace zm::ds
