#include "zeromount/pt/dcp_keys.h"

#include <algorithm>

namespace zm::pt::dcp {
namespace {

using Path = std::vector<std::variant<std::string, int64_t>>;

const std::string* str(const Path& p, size_t i) {
  return i < p.size() ? std::get_if<std::string>(&p[i]) : nullptr;
}

// "<fqn>.<last>" split at the last dot: a parameter's fqn has dots, a state or hyper-parameter
// name has none.
bool split_last(std::string_view s, std::string& param, std::string& name) {
  const size_t dot = s.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == s.size()) return false;
  param = s.substr(0, dot);
  name = s.substr(dot + 1);
  return true;
}

// The path torch's flatten_state_dict gives a key of its default names, for a file without
// planner_data: ("model", fqn), ("optimizer", "state", fqn, k), ("optimizer", "param_groups", i, h).
Path default_path(const std::string& fqn) {
  std::string p, n;
  if (fqn.starts_with("model.")) return {std::string("model"), fqn.substr(6)};
  if (fqn.starts_with("optimizer.state.") && split_last(std::string_view(fqn).substr(16), p, n))
    return {std::string("optimizer"), std::string("state"), p, n};
  constexpr std::string_view groups = "optimizer.param_groups.";
  if (fqn.starts_with(groups) && split_last(std::string_view(fqn).substr(groups.size()), p, n) && !p.empty() &&
      p.size() <= 9 && std::ranges::all_of(p, [](char c) { return c >= '0' && c <= '9'; }))
    return {std::string("optimizer"), std::string("param_groups"), int64_t(std::stoll(p)), n};
  return {fqn};
}

}  // namespace

KeyRole key_role(const StoredKey& k) {
  const Path path = k.path.empty() ? default_path(k.fqn) : k.path;
  KeyRole r;
  const std::string* top = str(path, 0);
  if (!top) return r;
  if (path.size() == 1) {  // torchtitan: the model's state dict merged at the top level
    if (k.tensor) r = {Family::Model, *top, {}, {}};
    return r;
  }
  if (*top == "model" && path.size() == 2 && str(path, 1)) return {Family::Model, *str(path, 1), {}, {}};
  if (*top != "optimizer") return r;
  const std::string* second = str(path, 1);
  if (!second) return r;
  // torch's get_state_dict: ("optimizer", "state", fqn, k), ("optimizer", "param_groups", i, h)
  if (path.size() == 4 && *second == "state" && str(path, 2) && str(path, 3))
    return {Family::OptimizerState, *str(path, 2), *str(path, 3), {}};
  if (path.size() == 4 && *second == "param_groups" && std::holds_alternative<int64_t>(path[2]) && str(path, 3))
    return {Family::ParamGroup, {}, *str(path, 3), std::get<int64_t>(path[2])};
  // flatten_optimizer_state_dict=True (torchtitan): ("optimizer", "state.<fqn>.<k>"), ("optimizer",
  // "param_groups.<fqn>.<hyper>")
  if (path.size() == 2) {
    std::string p, n;
    if (second->starts_with("state.") && split_last(std::string_view(*second).substr(6), p, n))
      return {Family::OptimizerState, p, n, {}};
    if (second->starts_with("param_groups.") && split_last(std::string_view(*second).substr(13), p, n))
      return {Family::ParamGroup, p, n, {}};
  }
  return r;
}

Style style_of(const ReadMetadata& md) {
  bool model = false, optimizer = false, titan = false;
  for (const StoredKey& k : md.keys) {
    const KeyRole r = key_role(k);
    if (r.family == Family::Model) {
      model = true;
      titan |= k.path.size() == 1;
    } else if (r.family == Family::OptimizerState || r.family == Family::ParamGroup) {
      optimizer = true;
      titan |= k.path.size() == 2;
    }
  }
  if (titan) return Style::Torchtitan;
  if (model && optimizer) return Style::Fsdp2;
  if (model) return Style::ModelOnly;
  if (optimizer) return Style::OptimizerOnly;
  return Style::Unknown;
}

std::string_view style_name(Style s) {
  switch (s) {
    case Style::Fsdp2:
      return "fsdp2";
    case Style::Torchtitan:
      return "torchtitan";
    case Style::ModelOnly:
      return "model-only";
    case Style::OptimizerOnly:
      return "optimizer-only";
    case Style::Unknown:
      break;
  }
  return "unknown";
}

}  // namespace zm::pt::dcp
