// transformers' revert_weight_conversion (core_model_loading.py, 5.x), over names and views instead
// of tensors. Each step below names the Python it follows; where they differ, the comment says why.
#include "zeromount/view/files/saved_layout.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "zeromount/pt/error.h"

namespace zm::view {

extern const char* const kTransformersConversions;  // data/transformers_conversions.json, embedded by CMake

namespace {

using nlohmann::json;

const json& table() {
  static const json t = json::parse(kTransformersConversions);
  return t;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

// Capture groups a pattern opens: `(` neither escaped nor followed by `?`.
int groups_in(const std::string& p) {
  int n = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    if (p[k] == '\\') {
      ++k;
      continue;
    }
    if (p[k] == '(' && (k + 1 >= p.size() || p[k + 1] != '?')) ++n;
  }
  return n;
}

// One reversed WeightTransform: what its __init__ makes of the swapped patterns.
struct Transform {
  bool converter = false;
  std::vector<std::string> sources, targets;  // processed, as the Python object holds them
  std::vector<json> ops;                      // reversed ops, in the order they run
  std::regex compiled;
  std::vector<int> branch_group;  // the group that is branch i of the alternation
};

// process_target_pattern: anchors and lookarounds dropped, `\.` made `.`, the first capture group `\1`.
std::pair<std::string, std::string> process_target(std::string p) {
  if (!p.empty() && p.front() == '^') p.erase(0, 1);
  if (!p.empty() && p.back() == '$') p.pop_back();
  p = std::regex_replace(p, std::regex(R"(\(\?.+?\)?\))"), "");
  p = replace_all(p, "\\.", ".");
  std::smatch m;
  std::string group;
  if (std::regex_search(p, m, std::regex(R"(\(.+?\))"))) {
    group = m.str(0);
    p.replace(p.find(group), group.size(), "\\1");
  }
  return {p, group};
}

Transform make_transform(bool converter, const std::vector<std::string>& sources,
                         const std::vector<std::string>& targets, std::vector<json> ops) {
  Transform t;
  t.converter = converter;
  t.ops = std::move(ops);
  std::string group;
  for (const auto& p : targets) {
    auto [processed, g] = process_target(p);
    t.targets.push_back(processed);
    if (!g.empty()) {
      if (!group.empty() && group != g) throw Error("several capture groups in " + p, EINVAL);
      group = g;
    }
  }
  std::string alternation;
  int next_group = 1;
  for (size_t i = 0; i < sources.size(); ++i) {
    std::string p = sources[i];
    if (size_t at = p.find("\\1"); at != std::string::npos) {
      if (group.empty()) throw Error("pattern " + p + " refers to a group no target has", EINVAL);
      p.replace(at, 2, group);
    }
    if (sources.size() == targets.size()) {  // process_source_pattern
      if (targets[i].starts_with("^") && !p.starts_with("^")) p = "^" + p;
      if (targets[i].ends_with("$") && !p.ends_with("$")) p += "$";
    }
    t.sources.push_back(p);
    alternation += (i ? "|(" : "(") + replace_all(p, ".*.", "\\..*\\.") + ")";
    t.branch_group.push_back(next_group);
    next_group += 1 + groups_in(p);
  }
  t.compiled = std::regex(alternation, std::regex::ECMAScript);
  return t;
}

// WeightTransform.rename_source_key (no scope_prefix: transforms of the root model only). Returns
// the index of the source pattern that matched, or -1.
int rename(const Transform& t, std::string& key) {
  std::smatch m;
  if (!std::regex_search(key, m, t.compiled)) return -1;
  size_t branch = 0;
  while (branch + 1 < t.branch_group.size() && !m[size_t(t.branch_group[branch])].matched) ++branch;
  std::string replacement = t.targets[0];
  for (size_t at = 0; (at = replacement.find('\\', at)) != std::string::npos;) {
    size_t end = at + 1;
    while (end < replacement.size() && std::isdigit(static_cast<unsigned char>(replacement[end]))) ++end;
    if (end == at + 1) {
      ++at;
      continue;
    }
    const std::string g = m.str(size_t(t.branch_group[branch] + std::stoi(replacement.substr(at + 1, end - at - 1))));
    replacement.replace(at, end - at, g);
    at += g.size();
  }
  const std::string found = m.str(0);
  key.replace(key.find(found), found.size(), replacement);
  return int(branch);
}

std::vector<std::string> strings(const json& j) {
  return j.get<std::vector<std::string>>();
}

// ConversionOps.reverse_op.
json reverse_op(const json& op) {
  const std::string name = op.at("op");
  if (name == "MergeModulelist") return {{"op", "SplitModulelist"}, {"dim", op.at("dim")}};
  if (name == "Concatenate") return {{"op", "Chunk"}, {"dim", op.at("dim")}};
  if (name == "Chunk") return {{"op", "Concatenate"}, {"dim", op.at("dim")}};
  if (name == "Transpose") return {{"op", "Transpose"}, {"dim0", op.at("dim1")}, {"dim1", op.at("dim0")}};
  throw Error("operation " + name + " has no reverse here", EINVAL);
}

// A value between two ops: one view, or views concatenated along cat_dim.
struct Value {
  std::vector<TensorView> parts;
  int cat_dim = 0;
  std::vector<int64_t> shape;
};

Value whole(const TensorView& v) {
  return {{v}, 0, v.shape};
}

const TensorView& single(const Value& v, const std::string& what) {
  if (v.parts.size() != 1) throw Error(what + " of a concatenation is not supported", EINVAL);
  return v.parts[0];
}

int dim_of(int64_t dim, size_t rank, const std::string& what) {
  if (dim < 0) dim += int64_t(rank);
  if (dim < 0 || size_t(dim) >= rank) throw Error(what + ": dimension out of range", EINVAL);
  return int(dim);
}

using Dict = std::vector<std::pair<std::string, std::vector<Value>>>;  // a Python dict, in insertion order

Dict run_op(const json& op, Dict in, const Transform& t, const std::string& layer) {
  const std::string name = op.at("op");
  const std::string what = layer + ": " + name;
  Dict out;
  if (name == "Chunk") {  // Chunk.convert
    if (in.size() != 1 || t.targets.size() == 1) throw Error(what + " needs one input and several targets", EINVAL);
    TensorView v = single(in[0].second.at(0), what);
    const int d = dim_of(op.at("dim").get<int64_t>(), v.shape.size(), what);
    const int64_t n = int64_t(t.targets.size());
    if (v.shape[size_t(d)] % n)
      throw Error(what + ": size " + std::to_string(v.shape[size_t(d)]) + " does not split in " + std::to_string(n),
                  EINVAL);
    const int64_t size = v.shape[size_t(d)] / n;
    for (int64_t k = 0; k < n; ++k) {
      TensorView c = v;
      c.offset += k * size * v.strides[size_t(d)];
      c.shape[size_t(d)] = size;
      out.push_back({t.targets[size_t(k)], {whole(c)}});
    }
  } else if (name == "Concatenate") {  // Concatenate.convert: in source-pattern order
    Value cat;
    for (const auto& sp : t.sources)
      for (auto& [key, values] : in)
        if (key == sp)
          for (const Value& v : values) {
            const TensorView& part = single(v, what);
            if (cat.parts.empty()) {
              cat.cat_dim = dim_of(op.at("dim").get<int64_t>(), part.shape.size(), what);
              cat.shape = part.shape;
            } else {
              std::vector<int64_t> a = cat.shape, b = part.shape;
              if (a.size() != b.size()) throw Error(what + ": ranks differ", EINVAL);
              a[size_t(cat.cat_dim)] = b[size_t(cat.cat_dim)] = 0;
              if (a != b) throw Error(what + ": shapes differ outside the dimension", EINVAL);
              cat.shape[size_t(cat.cat_dim)] += part.shape[size_t(cat.cat_dim)];
            }
            cat.parts.push_back(part);
          }
    out.push_back({t.targets.at(0), {cat}});
  } else if (name == "SplitModulelist") {  // SplitModulelist.convert: torch.chunk by 1, then squeeze()
    for (auto& [key, values] : in) {
      const TensorView v = single(values.at(0), what);
      const int d = dim_of(op.at("dim").get<int64_t>(), v.shape.size(), what);
      std::string pattern = key;
      if (in.size() == 1) {
        if (t.targets.size() != 1) throw Error(what + ": undefined operation", EINVAL);
        pattern = t.targets[0];
      }
      for (int64_t i = 0; i < v.shape[size_t(d)]; ++i) {
        TensorView e = v;
        e.offset += i * v.strides[size_t(d)];
        e.shape[size_t(d)] = 1;
        for (size_t k = e.shape.size(); k-- > 0;)
          if (e.shape[k] == 1) {
            e.shape.erase(e.shape.begin() + long(k));
            e.strides.erase(e.strides.begin() + long(k));
          }
        out.push_back({replace_all(pattern, "*", std::to_string(i)), {whole(e)}});
      }
    }
  } else if (name == "Transpose") {  // Transpose.convert (check_dims is outside the vocabulary)
    if (in.size() != 1) throw Error(what + ": undefined operation", EINVAL);
    TensorView v = single(in[0].second.at(0), what);
    const int d0 = dim_of(op.at("dim0").get<int64_t>(), v.shape.size(), what);
    const int d1 = dim_of(op.at("dim1").get<int64_t>(), v.shape.size(), what);
    std::swap(v.shape[size_t(d0)], v.shape[size_t(d1)]);
    std::swap(v.strides[size_t(d0)], v.strides[size_t(d1)]);
    std::string target = t.targets.at(0);
    if (t.targets.size() > 1) {
      if (t.sources.size() != 1) throw Error(what + ": undefined operation", EINVAL);
      target = t.sources[0];
    }
    out.push_back({target, {whole(v)}});
  } else {
    throw Error(what + " is outside the vocabulary", EINVAL);
  }
  return out;
}

}  // namespace

struct Conversion::Rules {
  std::vector<Transform> converters, renamings;  // reversed, in revert_weight_conversion's order
};

bool TensorView::contiguous() const {
  int64_t expect = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] != 1 && strides[k] != expect) return false;
    expect *= shape[k];
  }
  return true;
}

uint64_t TensorView::numel() const {
  uint64_t n = 1;
  for (int64_t s : shape) n *= uint64_t(s);
  return n;
}

const std::string& conversions_version() {
  static const std::string v = table().at("transformers").get<std::string>();
  return v;
}

Conversion conversion_named(const std::string& key) {
  Conversion c;
  const json& t = table();
  if (!t.at("mapping").contains(key)) {
    c.reason = "'" + key + "' is not in transformers " + conversions_version() + "'s conversion table";
    return c;
  }
  c.key = key;
  if (t.at("outside").contains(key)) {
    c.reason = "transformers' entry '" + key +
               "' is outside what zeromount interprets: " + t.at("outside").at(key).get<std::string>();
    return c;
  }
  // revert_weight_conversion for a model not made by from_pretrained (as the Trainer's own save of a
  // model built from its config): the entry without "legacy" and without PrefixChange, reversed
  // from the last transform to the first, converters applied before renamings.
  auto rules = std::make_shared<Conversion::Rules>();
  const json& entry = t.at("mapping").at(key);
  try {
    for (auto it = entry.rbegin(); it != entry.rend(); ++it) {
      const std::string kind = it->at("kind");
      if (kind == "PrefixChange") continue;
      std::vector<json> ops;
      if (kind == "WeightConverter") {
        const auto& forward = it->at("operations");
        for (auto op = forward.rbegin(); op != forward.rend(); ++op) ops.push_back(reverse_op(*op));
      }
      Transform r = make_transform(kind == "WeightConverter", strings(it->at("target")), strings(it->at("source")),
                                   std::move(ops));
      (r.converter ? rules->converters : rules->renamings).push_back(std::move(r));
    }
  } catch (const std::exception& e) {  // a pattern std::regex refuses, an op without reverse
    c.reason = "transformers' entry '" + key + "' cannot be reversed here: " + e.what();
    return c;
  }
  if (rules->converters.empty() && rules->renamings.empty()) {
    c.reason = "transformers' entry '" + key + "' holds only PrefixChange, which save_pretrained drops";
    return c;
  }
  c.rules = std::move(rules);
  return c;
}

Conversion choose_conversion(const std::string& config_json) {
  Conversion none;
  if (config_json.empty()) {
    none.reason = "the checkpoint folder has no config.json";
    return none;
  }
  const json cfg = json::parse(config_json, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) {
    none.reason = "config.json is not a JSON object";
    return none;
  }
  const json& mapping = table().at("mapping");
  // A composite model (a text_config, a vision_config) gets transforms scoped to its modules, by
  // the module tree we do not have: not guessed. That holds even where no sub-model is in the table:
  // Llava's inner LlavaModel entry turns `language_model.model.` into `language_model.` inside the
  // `model.` module only, and the root entry alone named 20 of a tiny Llava's 48 tensors neither
  // as saved nor as run (the HF oracle, docs/oracle-results.md).
  for (const auto& [field, sub] : cfg.items())
    if (sub.is_object() && sub.contains("model_type") && sub["model_type"].is_string()) {
      none.key = sub["model_type"].get<std::string>();
      none.reason = "config.json's " + field + " is a sub-model ('" + sub["model_type"].get<std::string>() +
                    "'): transformers converts a composite model with transforms scoped to its modules, which "
                    "zeromount does not reproduce";
      return none;
    }
  if (cfg.contains("architectures") && cfg["architectures"].is_array() && !cfg["architectures"].empty() &&
      cfg["architectures"][0].is_string() && mapping.contains(cfg["architectures"][0].get<std::string>()))
    return conversion_named(cfg["architectures"][0].get<std::string>());
  if (!cfg.contains("model_type") || !cfg["model_type"].is_string()) {
    none.reason = "config.json has no model_type";
    return none;
  }
  const std::string type = cfg["model_type"];
  if (!mapping.contains(type)) {
    none.reason = "model_type '" + type + "' is not in transformers " + conversions_version() +
                  "'s conversion table: its run-time names are its saved names";
    return none;
  }
  return conversion_named(type);
}

std::vector<SavedTensor> saved_layout(const Conversion& c, const std::vector<RuntimeTensor>& runtime) {
  auto view_of = [&](size_t k) {
    TensorView v{k, 0, runtime[k].shape, std::vector<int64_t>(runtime[k].shape.size())};
    int64_t stride = 1;
    for (size_t d = v.shape.size(); d-- > 0;) {
      v.strides[d] = stride;
      stride *= v.shape[d];
    }
    return v;
  };
  auto renamed = [&](std::string key) {
    if (c.rules)
      for (const Transform& r : c.rules->renamings) rename(r, key);
    return key;
  };
  struct Bucket {
    const Transform* converter;
    Dict collected;
  };
  std::vector<SavedTensor> out;
  std::vector<Bucket> buckets;
  std::map<std::string, size_t> bucket_of;       // converter key -> bucket
  std::vector<std::pair<size_t, size_t>> order;  // (0, position in out) or (1, bucket), in run-time order
  for (size_t k = 0; k < runtime.size(); ++k) {
    std::string key = runtime[k].name;
    const Transform* hit = nullptr;
    int pattern = -1;
    if (c.rules)
      for (const Transform& conv : c.rules->converters)
        if ((pattern = rename(conv, key)) >= 0) {
          hit = &conv;
          break;
        }
    if (!hit) {
      TensorView v = view_of(k);
      out.push_back({renamed(key), v.shape, {v}, 0});
      order.push_back({0, out.size() - 1});
      continue;
    }
    auto [it, fresh] = bucket_of.emplace(key, buckets.size());
    if (fresh) {
      buckets.push_back({hit, {}});
      order.push_back({1, it->second});
    }
    Dict& d = buckets[it->second].collected;
    const std::string& sp = hit->sources[size_t(pattern)];
    auto slot = std::find_if(d.begin(), d.end(), [&](const auto& e) { return e.first == sp; });
    if (slot == d.end()) slot = d.insert(d.end(), {sp, {}});
    slot->second.push_back(whole(view_of(k)));
  }
  std::vector<SavedTensor> result;
  for (const auto& [is_bucket, at_] : order) {
    const auto at = at_;  // a lambda below takes it: clang 14 cannot capture a structured binding
    if (!is_bucket) {
      result.push_back(std::move(out[at]));
      continue;
    }
    const std::string& layer =
        std::find_if(bucket_of.begin(), bucket_of.end(), [&](const auto& e) { return e.second == at; })->first;
    Dict values = std::move(buckets[at].collected);
    for (const json& op : buckets[at].converter->ops)
      values = run_op(op, std::move(values), *buckets[at].converter, layer);
    // WeightConverter.convert: the targets get the prefix and suffix around the first of them
    // found in the layer name (".*." read as ".0.").
    const std::string full = replace_all(layer, ".*.", ".0.");
    std::string prefix, suffix;
    for (const auto& [name, v] : values)
      if (size_t p = full.find(name); p != std::string::npos) {
        prefix = full.substr(0, p);
        suffix = full.substr(p + name.size());
        break;
      }
    for (auto& [name, v] : values)
      result.push_back({renamed(prefix + name + suffix), v.at(0).shape, v.at(0).parts, v.at(0).cat_dim});
  }
  return result;
}

}  // namespace zm::view
