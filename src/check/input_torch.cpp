// torch's optimizer.state_dict() as saved in optimizer.pt (the plain Trainer's checkpoint-N/, the
// mount's layouts/torch/): {'state': {id: {'step', 'exp_avg', ...}}, 'param_groups': [{..., 'params':
// [ids]}]}. torch numbers parameters across groups in the order the optimizer was given them; the
// file names them only when the optimizer was built from named parameters (torch >= 2.6 keeps
// 'param_names' in each group). The Trainer passes bare tensors, so its files name none: their
// state is "param <id>" here, and diff names the ids from the other input's numbering.
#include <map>
#include <set>

#include "readers.h"
#include "zeromount/pt/error.h"

namespace zm::check {

namespace {

const char* kCheck = "torch-ids";

std::string param_id(int64_t id) {
  return "param " + std::to_string(id);
}

// One id's state entry as an item (a tensor, or a number such as a plain 'step').
void add_state(uint32_t file_id, const std::string& where, const std::string& param, const std::string& key,
               const pt::Node* v, Input& in) {
  Item it;
  it.param = param;
  it.state = state_named(key);
  it.stored = where;
  if (v->is(pt::Kind::Int) || v->is(pt::Kind::Float)) {
    it.dtype = pt::DType::F64;
    it.value = v->is(pt::Kind::Int) ? double(v->i) : v->f;
  } else if (v->is(pt::Kind::Tensor) && std::holds_alternative<pt::StorageRecord>(v->tensor->storage)) {
    const pt::Tensor& t = *v->tensor;
    it.dtype = t.dtype;
    it.shape = t.shape;
    if (!t.contiguous())
      it.unread = "a strided view: its values are not read";
    else
      it.bytes.append_extent({file_id, t.byte_offset(), t.nbytes()});
  } else {
    return;  // a value no other format keeps per parameter
  }
  in.items.push_back(std::move(it));
}

// The shape an id's state gives its parameter: any tensor state's but a one-element 'step'.
std::vector<int64_t> state_shape(const pt::Node* s) {
  if (!s || !s->is(pt::Kind::Dict)) return {};
  for (const auto& [k, v] : s->entries)
    if (k->is(pt::Kind::Str) && k->s != "step" && v->is(pt::Kind::Tensor)) return v->tensor->shape;
  return {};
}

}  // namespace

bool is_torch_optimizer(const pt::Node* root) {
  return root && root->is(pt::Kind::Dict) && root->get("state") && root->get("param_groups") &&
         root->get("state")->is(pt::Kind::Dict) && root->get("param_groups")->is(pt::Kind::List);
}

void read_torch_optimizer(const pt::PtFile& pt, uint32_t file_id, const std::string& name, Input& in, Findings& f) {
  const pt::Node* groups = pt.root->get("param_groups");
  const pt::Node* state = pt.root->get("state");
  f.ran(kCheck);
  // Every group's ids (and names): each id in one group only, names as many as ids.
  std::map<int64_t, std::string> names;  // id -> its name
  size_t named_groups = 0;
  for (size_t g = 0; g < groups->items.size(); ++g) {
    const std::string at = name + ": key param_groups." + std::to_string(g);
    const pt::Node* group = groups->items[g];
    const pt::Node* ids = group->is(pt::Kind::Dict) ? group->get("params") : nullptr;
    const pt::Node* pnames = group->is(pt::Kind::Dict) ? group->get("param_names") : nullptr;
    if (!ids || !ids->is(pt::Kind::List)) return f.fail(kCheck, at, "no 'params' list of ids: not torch's state_dict");
    if (pnames && (!pnames->is(pt::Kind::List) || pnames->items.size() != ids->items.size()))
      return f.fail(kCheck, at + ".param_names", "not a list of one name per id in 'params'");
    named_groups += pnames != nullptr;
    for (size_t i = 0; i < ids->items.size(); ++i) {
      const pt::Node* id = ids->items[i];
      if (!id->is(pt::Kind::Int)) return f.fail(kCheck, at + ".params", "holds " + pt::repr(id) + " where an id goes");
      const pt::Node* n = pnames ? pnames->items[i] : nullptr;
      if (n && !n->is(pt::Kind::Str)) return f.fail(kCheck, at + ".param_names", "holds " + pt::repr(n));
      if (!names.emplace(id->i, n ? n->s : param_id(id->i)).second)
        return f.fail(kCheck, at + ".params",
                      "lists id " + std::to_string(id->i) + ", which an earlier group lists too: torch refuses it");
    }
  }
  if (named_groups && named_groups != groups->items.size())
    return f.fail(kCheck, name + ": key param_groups",
                  "some groups name their parameters, others not: torch refuses it");
  // State no group lists is kept by torch's load_state_dict but never used: lost, silently.
  for (const auto& [k, v] : state->entries)
    if (!k->is(pt::Kind::Int) || !names.count(k->i))
      f.fail(kCheck, name + ": key state." + pt::repr(k),
             "state of an id no param group lists: load_state_dict keeps it unused (a parameter dropped?)");
  in.unnamed_ids = !groups->items.empty() && !named_groups;
  in.holds_hypers = true;
  size_t skipped = 0;
  for (size_t g = 0; g < groups->items.size(); ++g) {
    const pt::Node* group = groups->items[g];
    auto members = std::make_shared<std::vector<std::string>>();
    auto& order = in.torch_order.emplace_back();
    std::vector<std::pair<std::string, const pt::Node*>> hypers;
    for (const auto& [k, v] : group->entries)
      if (k->is(pt::Kind::Str)) hypers.emplace_back(k->s, v);
    for (const pt::Node* id : group->get("params")->items) {
      const std::string& param = names.at(id->i);
      members->push_back(param);
      const pt::Node* s = state->get(id->i);
      order.push_back({param, state_shape(s)});
      if (!s || !s->is(pt::Kind::Dict)) continue;  // no state yet: never stepped, or no gradient
      for (const auto& [k, v] : s->entries)
        if (k->is(pt::Kind::Str))
          add_state(file_id, name + ": key state." + std::to_string(id->i) + "." + k->s, param, k->s, v, in);
    }
    skipped += add_hypers(hypers, int(g), members, name + ": param_groups", in);
  }
  if (in.unnamed_ids)
    f.notes.push_back(name +
                      ": its param groups name no parameters (the Trainer passes bare tensors; torch >= 2.6 "
                      "keeps 'param_names' only for named ones): state listed as 'param <id>'");
  if (skipped)
    f.notes.push_back(name + ": " + std::to_string(skipped) +
                      " hyper-parameter value(s) neither numbers nor None: "
                      "not compared");
}

}  // namespace zm::check
