// What every rank of a DeepSpeed tag keeps its own copy of must be one value: each optimizer file
// holds the param groups' hyper-parameters (a rank saved by another run, or edited, would resume
// with its own learning rate), and DeepSpeed's Muon keeps every parameter's whole momentum buffer
// on each rank its partition touches (the index compares those copies by hash: ds::index_tag).
#include <map>

#include "readers.h"

namespace zm::check {

namespace {

const char* kCheck = "ranks-agree";

}  // namespace

void RankGroups::add(const pt::PtFile& pt, const std::string& name) {
  const pt::Node* groups = find_key(pt.root, "param_groups");
  if (!groups || !groups->is(pt::Kind::List)) return;  // an elastic save keeps none
  std::vector<std::map<std::string, std::string>> values;
  for (const pt::Node* g : groups->items) {
    auto& v = values.emplace_back();
    if (g->is(pt::Kind::Dict))
      for (const auto& [k, x] : g->entries)
        if (k->is(pt::Kind::Str) && !is_group_list_key(k->s)) v[k->s] = pt::repr(x, 4);
  }
  files_.emplace_back(name, std::move(values));
}

void RankGroups::check(Findings& f) const {
  if (files_.size() < 2) return;
  const auto& [first, want] = files_.front();
  for (const auto& [name, have] : files_) {
    f.ran(kCheck);
    if (have.size() != want.size()) {
      f.fail(kCheck, name + ": key param_groups",
             std::to_string(have.size()) + " groups, " + first + " holds " + std::to_string(want.size()));
      continue;
    }
    for (size_t g = 0; g < have.size(); ++g) {
      std::string m;
      for (const auto& [k, v] : have[g]) {
        const auto w = want[g].find(k);
        if (w == want[g].end() || w->second != v)
          m += (m.empty() ? "" : "; ") + k + "=" + v + " (" + (w == want[g].end() ? "absent" : w->second) + " in " +
               first + ")";
      }
      for (const auto& [k, v] : want[g])
        if (!have[g].count(k)) m += (m.empty() ? "" : "; ") + k + " absent (" + v + " in " + first + ")";
      if (!m.empty()) f.fail(kCheck, name + ": key param_groups." + std::to_string(g), m);
    }
  }
}

void muon_copies_agree(const ds::TagIndex& ix, Findings& f) {
  for (size_t k = 1; k < ix.state_names.size(); ++k)
    if (ix.whole(k)) f.ran(kCheck);
}

bool muon_copy_differs(const std::string& index_error) {
  return index_error.find("copy of the whole buffer differs") != std::string::npos;
}

}  // namespace zm::check
