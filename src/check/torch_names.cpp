// Naming an optimizer.pt's ids from another input. torch keys optimizer state by position: the
// n-th parameter the optimizer was given, counted across its groups. The Trainer gives them in
// module order, group by group, as DeepSpeed's param groups (and a DCP save's `params` lists)
// keep them, so the other input's numbering names the ids. How it can be wrong: two parameters of
// one shape swapped in the order (an optimizer built from another module order, or groups built
// in another order with the same sizes) pass every check here and are named crosswise; the
// moments then differ from the other input's, so diff still reports differences, under the
// wrong names.
#include <map>

#include "zeromount/check/input.h"
#include "zeromount/pt/text.h"

namespace zm::check {

namespace {

// Why `named`'s numbering cannot name `unnamed`'s ids, or "" when it can.
std::string mismatch(const Input& unnamed, const Input& named) {
  const TorchOrder &a = unnamed.torch_order, &b = named.torch_order;
  if (b.empty()) return "the other input keeps no optimizer numbering (no param groups)";
  if (a.size() != b.size()) return std::to_string(a.size()) + " param groups against " + std::to_string(b.size());
  std::map<std::string, const Item*> weights;  // unnamed's own weights, by name
  for (const Item& it : unnamed.items)
    if (it.state == kWeight) weights.emplace(it.param, &it);
  for (size_t g = 0; g < a.size(); ++g) {
    const std::string group = "group " + std::to_string(g);
    if (a[g].size() != b[g].size())
      return group + " holds " + std::to_string(a[g].size()) + " ids, the other's " + std::to_string(b[g].size()) +
             " parameters";
    for (size_t i = 0; i < a[g].size(); ++i) {
      const TorchParam &x = a[g][i], &y = b[g][i];
      if (!x.shape.empty() && x.shape != y.shape)
        return x.name + " (" + group + ") has state of shape " + pt::shape_text(x.shape) + ", the other's " + y.name +
               " is " + pt::shape_text(y.shape);
      const auto w = weights.find(y.name);
      if (w != weights.end() && w->second->shape != y.shape)
        return "its own weight " + y.name + " is " + pt::shape_text(w->second->shape) + ", the other's " +
               pt::shape_text(y.shape);
    }
  }
  return "";
}

}  // namespace

bool name_torch_ids(Input& unnamed, const Input& named, std::string& said) {
  if (const std::string why = mismatch(unnamed, named); !why.empty()) {
    said = "optimizer.pt's ids left as 'param <id>': " + why;
    return false;
  }
  std::map<std::string, std::string> name_of;  // "param <id>" -> the other's name
  size_t n = 0;
  for (size_t g = 0; g < named.torch_order.size(); ++g)
    for (size_t i = 0; i < named.torch_order[g].size(); ++i, ++n)
      name_of[unnamed.torch_order[g][i].name] = named.torch_order[g][i].name;
  std::map<const std::vector<std::string>*, Members> renamed;  // each group's members, once
  for (Item& it : unnamed.items) {
    if (const auto m = name_of.find(it.param); m != name_of.end()) it.param = m->second;
    if (!it.members) continue;
    Members& r = renamed[it.members.get()];
    if (!r) {
      auto v = std::make_shared<std::vector<std::string>>();
      for (const std::string& p : *it.members) v->push_back(name_of.count(p) ? name_of.at(p) : p);
      r = v;
    }
    it.members = r;
  }
  unnamed.torch_order = named.torch_order;  // mismatch() found every group of one length
  unnamed.unnamed_ids = false;
  said = "optimizer.pt's " + std::to_string(n) +
         " ids named by the other input's module order, group by group (every shape agrees)";
  return true;
}

}  // namespace zm::check
