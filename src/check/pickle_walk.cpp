// Walking a decoded pickle for what the checks compare: steps and tensors, with their key paths.
// The tree may share nodes (the memo), so each node is visited once, and the depth is bounded.
#include <cmath>
#include <unordered_set>

#include "readers.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"

namespace zm::check {

namespace {

constexpr int kMaxDepth = 32;

std::string key_text(const pt::Node* k) {
  if (k->is(pt::Kind::Str)) return k->s;
  if (k->is(pt::Kind::Int)) return std::to_string(k->i);
  return {};
}

// Calls visit(path, node) for every node below `root` reached through dicts and lists.
template <class Visit>
void walk(const pt::Node* root, Visit&& visit) {
  std::unordered_set<const pt::Node*> seen;
  const auto go = [&](auto&& self, const pt::Node* n, const std::string& path, int depth) -> void {
    if (!n || depth > kMaxDepth || !seen.insert(n).second) return;
    if (!visit(path, n)) return;
    const auto join = [&](const std::string& k) { return path.empty() ? k : path + "." + k; };
    if (n->is(pt::Kind::Dict) || (n->is(pt::Kind::Object) && !n->entries.empty())) {
      for (const auto& [k, v] : n->entries) {
        const std::string kt = key_text(k);
        if (!kt.empty()) self(self, v, join(kt), depth + 1);
      }
    } else if (n->is(pt::Kind::List) || n->is(pt::Kind::Tuple)) {
      for (size_t i = 0; i < n->items.size(); ++i) self(self, n->items[i], join(std::to_string(i)), depth + 1);
    }
  };
  go(go, root, "", 0);
}

const char* const kOptimizerKeys[] = {"exp_avg", "exp_avg_sq", "step", "momentum_buffer", "max_exp_avg_sq"};

}  // namespace

const pt::Node* find_key(const pt::Node* root, const std::string& key) {
  const pt::Node* found = nullptr;
  walk(root, [&](const std::string&, const pt::Node* n) {
    if (!found && n->is(pt::Kind::Dict)) found = n->get(key);
    return !found;
  });
  return found;
}

std::string state_named(const std::string& s) {
  if (s == "fp32" || s == "param" || s == "weight") return kWeight;
  return s;
}

void collect_steps(const pt::PtFile& pt, const std::string& name, Input& in) {
  walk(pt.root, [&](const std::string& path, const pt::Node* n) {
    const size_t dot = path.rfind('.');
    const std::string last = dot == std::string::npos ? path : path.substr(dot + 1);
    if (last != "step" && last != "global_steps") return true;
    double v = NAN;
    if (n->is(pt::Kind::Int))
      v = double(n->i);
    else if (n->is(pt::Kind::Float))
      v = n->f;
    else if (n->is(pt::Kind::Tensor) && n->tensor->numel() == 1 &&
             std::holds_alternative<pt::StorageRecord>(n->tensor->storage)) {
      char raw[16];
      pt.file.read_exact(n->tensor->byte_offset(), raw, pt::element_size(n->tensor->dtype), "step");
      v = pt::element_value(raw, n->tensor->dtype);
    }
    if (!std::isnan(v)) in.steps.emplace_back(name + ": key " + path, v);
    return true;
  });
}

void collect_tensors(const pt::PtFile& pt, uint32_t file_id, const std::string& name, Input& in,
                     const std::string& param, const std::string& state) {
  walk(pt.root, [&](const std::string& path, const pt::Node* n) {
    if (!n->is(pt::Kind::Tensor)) return true;
    const pt::Tensor& t = *n->tensor;
    if (!std::holds_alternative<pt::StorageRecord>(t.storage)) return false;
    if (!param.empty() && !path.empty() && path != "param") return false;  // a universal file's cat_dim and such
    Item it;
    it.stored = name + (path.empty() ? "" : ": key " + path);
    if (!param.empty()) {
      it.param = param;
      it.state = state_named(state);
    } else {
      const size_t dot = path.rfind('.');
      const std::string last = dot == std::string::npos ? path : path.substr(dot + 1);
      bool optimizer = false;
      for (const char* k : kOptimizerKeys) optimizer |= last == k;
      it.param = optimizer && dot != std::string::npos ? path.substr(0, dot) : path;
      it.state = optimizer ? last : kWeight;
    }
    it.dtype = t.dtype;
    it.shape = t.shape;
    if (!t.contiguous()) {
      it.unread = "a strided view: its values are not read";  // listed, for diff's presence
      in.items.push_back(std::move(it));
      return false;
    }
    it.bytes.append_extent({file_id, t.byte_offset(), t.nbytes()});
    in.items.push_back(std::move(it));
    return false;
  });
}

}  // namespace zm::check
