// universal_checkpoint_info and ds_to_universal.py's merge_tp_slices rule table
// [tp §3, §4.3], decided once per parameter.
#include <algorithm>
#include <set>

#include "parallel.h"
#include "zeromount/ds/tp_merge.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

namespace {

std::vector<std::string> str_list(const Field& f) {
  std::vector<std::string> out;
  if (f.is_none()) return out;
  for (size_t k = 0; k < f.size(); ++k) out.push_back(f[k].as_str());
  return out;
}

std::vector<TpPattern> compile(const std::vector<std::string>& v) {
  std::vector<TpPattern> out;
  for (const auto& s : v) out.emplace_back(s);
  return out;
}

// Python's str repr: single quotes unless the text holds one and no double quote.
std::string py_str(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\' || c == q) out += '\\';
    out += c;
  }
  return out + q;
}

// The patterns of one evaluated category that match `name`; more than one is DeepSpeed's assertion.
const TpPattern* matched(const UcInfo::Category& c, const std::string& name, std::set<std::string>& used) {
  std::vector<const TpPattern*> hits;
  for (const auto& p : c.patterns)
    if (p.match(name)) hits.push_back(&p);
  if (hits.size() > 1) {
    std::vector<std::string> srcs;
    for (auto* h : hits) srcs.push_back(h->source());
    throw FormatError("Got more than one matching patterns=" + py_str_list(srcs) + " for " + name);
  }
  if (hits.empty()) return nullptr;
  used.insert(hits[0]->source());
  return hits[0];
}

std::vector<int64_t> ints(const Field& f) {
  std::vector<int64_t> v;
  for (size_t k = 0; k < f.size(); ++k) v.push_back(f[k].as_int());
  return v;
}

SubParamShape spec_of(const SubParamRule& r) {
  SubParamShape s;
  s.entries = r.shape;
  s.partition_dim = r.partition_dim;
  return s;
}

}  // namespace

std::string py_str_list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t k = 0; k < v.size(); ++k) out += (k ? ", " : "") + py_str(v[k]);
  return out + "]";
}

bool UcInfo::has_any_pattern() const {
  for (const Category* c : {&replicated, &average, &two_sub, &row, &vocab, &pipeline_replicated})
    if (!c->patterns.empty()) return true;
  return !sub_params.empty();
}

UcInfo read_uc_info(TagIndex& index, const Field& info) {
  UcInfo uc;
  if (auto v = info.find("universal_checkpoint_version"); v && !v->is_none())
    uc.version = v->is(pt::Kind::Float) ? v->node()->f : double(v->as_int());
  if (auto u = info.find("autotp_unsupported_parameter_patterns"); u && !u->is_none() && u->size() > 0) {
    std::string what;
    for (const auto& [pattern, reason] : u->items())
      what += (what.empty() ? "" : ", ") + pattern + ": " + reason.as_str();
    throw Error(where(info.file(), "AutoTP universal checkpoint conversion is not supported for " + what + "."),
                ENOTSUP);
  }
  for (UcInfo::Category* c : {&uc.replicated, &uc.average, &uc.two_sub, &uc.row, &uc.vocab, &uc.pipeline_replicated}) {
    auto f = info.find(c->key);
    if (!f) continue;
    const auto srcs = str_list(*f);
    c->patterns = compile(srcs);
    if (!srcs.empty()) index.patterns.emplace_back(c->key, srcs);
  }
  if (auto subs = info.find("parameter_with_sub_params"); subs && !subs->is_none()) {
    std::vector<std::string> all;
    for (size_t k = 0; k < subs->size(); ++k) {
      const Field d = (*subs)[k];
      SubParamRule r;
      r.patterns = str_list(d["patterns"]);
      r.partition_dim = int(d["partition_dim"].as_int());
      const Field shape = d["shape"];
      for (size_t j = 0; j < shape.size(); ++j) {
        const Field e = shape[j];
        const bool seq = e.is(pt::Kind::Tuple) || e.is(pt::Kind::List);
        r.shape.push_back(seq ? ints(e) : std::vector<int64_t>{e.as_int()});
        r.is_tuple.push_back(seq);
      }
      uc.sub_params.push_back(compile(r.patterns));
      all.insert(all.end(), r.patterns.begin(), r.patterns.end());
      index.sub_param_rules.push_back(std::move(r));
    }
    if (!all.empty()) index.patterns.emplace_back("parameter_with_sub_params", all);
  }
  if (auto w = info.find("sub_param_shard_widths"); w && !w->is_none())
    for (const auto& [pattern, lists] : w->items()) {
      auto& out = uc.widths[pattern];
      for (size_t k = 0; k < lists.size(); ++k) out.push_back(ints(lists[k]));
    }
  if (auto v = info.find("original_vocab_size"); v && !v->is_none()) index.original_vocab_size = v->as_int();
  return uc;
}

void assign_tp_rules(TagIndex& index, const UcInfo& uc, bool strict) {
  std::set<std::string> used;
  const size_t T = size_t(index.tp);
  for (Param& p : index.params) {
    if (p.rule == TpRule::Expert) continue;  // AutoEP experts: merged by merge_autoep_expert
    std::vector<Shape> shapes;
    std::vector<uint64_t> numels;
    for (const auto& s : p.slices) shapes.push_back(s.shape), numels.push_back(pt::numel(s.shape));
    // 1. sub-parameters: first rule, first pattern; always searched (and so always "used").
    int sub = -1;
    std::string sub_pattern;
    for (size_t r = 0; r < uc.sub_params.size() && sub < 0; ++r)
      for (const auto& pat : uc.sub_params[r])
        if (pat.match(p.name)) {
          sub = int(r), sub_pattern = pat.source();
          used.insert(sub_pattern);
          break;
        }
    Shape merged;
    if (matched(uc.replicated, p.name, used)) {
      p.rule = TpRule::Replicated;
      merged = shapes[0];
      for (size_t t = 1; t < T; ++t)
        if (shapes[t] != shapes[0])
          throw FormatError(where(index.dir, p.name + ": tp-replicated slices differ in shape"));
    } else if (matched(uc.average, p.name, used)) {
      p.rule = TpRule::Averaged;
      merged = shapes[0];
      for (size_t t = 1; t < T; ++t)
        if (shapes[t] != shapes[0]) throw FormatError(where(index.dir, p.name + ": averaged slices differ in shape"));
    } else if (matched(uc.two_sub, p.name, used)) {
      p.rule = TpRule::TwoSubParams;
      merged = TpCat::two_sub_params(shapes).shape();
    } else if (sub >= 0) {
      p.rule = TpRule::SubParams;
      p.sub_rule = sub;
      const SubParamRule& rule = index.sub_param_rules[size_t(sub)];
      auto w = uc.widths.find(sub_pattern);
      if (uc.version >= 0.4) {
        if (w == uc.widths.end())
          throw FormatError(where(index.dir, "Universal checkpoint version " + std::to_string(uc.version) +
                                                 " records no sub_param_shard_widths for " + p.name +
                                                 ", whose pattern " + sub_pattern + " declares sub-parameters."));
        p.sub_widths = w->second;
      } else {
        for (int64_t size : rule.shape.at(size_t(rule.partition_dim))) {
          if (size % int64_t(T) != 0)
            throw FormatError(where(index.dir, "Sub-parameter sizes of " + p.name + " are not divisible by tp_degree " +
                                                   std::to_string(T)));
          p.sub_widths.emplace_back(T, size / int64_t(T));
        }
      }
      const auto views = sub_param_views(spec_of(rule), p.sub_widths, numels, p.name);
      merged = TpCat::sub_params(views, rule.partition_dim, p.sub_widths).shape();
    } else {
      p.rule = TpRule::Cat;
      p.cat_dim = matched(uc.row, p.name, used) ? 1 : 0;
      merged = TpCat::concat(shapes, p.cat_dim).shape();
    }
    p.merged_numel = pt::numel(merged);
    p.vocab = matched(uc.vocab, p.name, used) != nullptr;
    if (p.vocab) {
      if (index.original_vocab_size < 0)
        throw FormatError(where(index.dir, p.name +
                                               ": KeyError: 'original_vocab_size' (a vocabulary pattern matches it, "
                                               "universal_checkpoint_info has no original_vocab_size)"));
      merged = vocab_cut(merged, index.original_vocab_size, p.name).shape;
    }
    p.shape = merged;
    p.numel = pt::numel(merged);
  }
  if (!strict) return;
  std::vector<std::string> unused;
  for (const UcInfo::Category* c : {&uc.replicated, &uc.average, &uc.two_sub, &uc.row, &uc.vocab})
    for (const auto& pat : c->patterns)
      if (!used.count(pat.source())) unused.push_back(pat.source());
  for (const auto& r : uc.sub_params)
    for (const auto& pat : r)
      if (!used.count(pat.source())) unused.push_back(pat.source());
  std::sort(unused.begin(), unused.end());
  unused.erase(std::unique(unused.begin(), unused.end()), unused.end());
  if (!unused.empty())
    throw FormatError(where(index.dir, "Unused patterns=" + py_str_list(unused) +
                                           " while merging tp slices (DeepSpeed's converter refuses them in strict "
                                           "mode: a parameter the patterns name has no optimizer state, e.g. frozen)"));
}

const char* tp_rule_name(TpRule r) {
  switch (r) {
    case TpRule::Cat:
      return "cat";
    case TpRule::Replicated:
      return "replicated";
    case TpRule::Averaged:
      return "averaged";
    case TpRule::TwoSubParams:
      return "2 sub-params";
    case TpRule::SubParams:
      return "sub-params";
    case TpRule::Expert:
      return "AutoEP experts";
  }
  return "?";
}

}  // namespace zm::ds
