// Param groups' hyper-parameters (lr, betas, eps, weight_decay, ...) as items, whatever format
// keeps them: DeepSpeed's optimizer files, a DCP folder's param_groups keys, torch's optimizer.pt.
// Each group's items carry the parameters it holds, so that diff matches groups by what they
// hold: two saves may number their groups differently.
#include <memory>
#include <optional>

#include "readers.h"
#include "zeromount/ds/torch_state.h"
#include "zeromount/pt/error.h"

namespace zm::check {

namespace {

// A number a group keeps: an int, a float or a bool (as 0 or 1).
std::optional<double> number_of(const pt::Node* v) {
  if (v->is(pt::Kind::Int)) return double(v->i);
  if (v->is(pt::Kind::Float)) return v->f;
  if (v->is(pt::Kind::Bool)) return v->b ? 1.0 : 0.0;
  return std::nullopt;
}

Item hyper_item(const std::string& name, double value, int group, const Members& members, const std::string& where) {
  Item it;
  it.state = name;
  it.stored = where + "[" + std::to_string(group) + "]." + name;
  it.dtype = pt::DType::F64;
  it.value = value;
  it.trainable = true;
  it.members = members;
  it.group = group;
  return it;
}

}  // namespace

bool is_group_list_key(const std::string& key) {
  return key == "params" || key == "param_names";
}

size_t add_hypers(const std::vector<std::pair<std::string, const pt::Node*>>& hypers, int group, const Members& members,
                  const std::string& where, Input& in) {
  size_t skipped = 0;
  for (const auto& [name, v] : hypers) {
    if (is_group_list_key(name)) continue;
    if (const auto x = number_of(v)) {
      in.items.push_back(hyper_item(name, *x, group, members, where));
      continue;
    }
    // A tuple or list of numbers (Adam's betas): one item per element, "betas[1]".
    bool numbers = (v->is(pt::Kind::Tuple) || v->is(pt::Kind::List)) && !v->items.empty();
    for (const pt::Node* e : v->items) numbers &= number_of(e).has_value();
    if (!numbers) {
      skipped += !v->is(pt::Kind::None);  // None (foreach, fused: "let torch pick") holds no value to compare
      continue;
    }
    for (size_t k = 0; k < v->items.size(); ++k)
      in.items.push_back(
          hyper_item(name + "[" + std::to_string(k) + "]", *number_of(v->items[k]), group, members, where));
  }
  return skipped;
}

void add_index_hypers(const ds::TagIndex& ix, const std::string& where, Input& in, Findings& f) {
  if (!ix.optimizer_saved) return;
  std::vector<ds::TorchGroup> groups;
  try {
    groups = ds::torch_groups(ix);
  } catch (const Error& e) {
    f.notes.push_back("hyper-parameters: not compared (" + std::string(e.what()) + ")");
    return;
  }
  size_t skipped = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    auto names = std::make_shared<std::vector<std::string>>();
    auto& order = in.torch_order.emplace_back();
    for (uint32_t p : groups[g].params) {
      names->push_back(ix.params[p].name);
      order.push_back({ix.params[p].name, ix.params[p].shape});
    }
    skipped += add_hypers(groups[g].hypers, int(g), names, where, in);
  }
  // An elastic save keeps no hyper-parameters (DeepSpeed takes the loading engine's).
  in.holds_hypers = !ix.elastic;
  if (skipped)
    f.notes.push_back(std::to_string(skipped) + " hyper-parameter value(s) neither numbers nor None: not compared");
}

}  // namespace zm::check
