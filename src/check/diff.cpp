#include "zeromount/check/diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "zeromount/check/input.h"
#include "zeromount/check/numbers.h"
#include "zeromount/pt/dtype.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"

namespace zm::check {

namespace {

constexpr const char* kPrefixes[] = {"optimizer.state.", "_orig_mod.", "module.", "model."};
constexpr size_t kShown = 20;

std::string shape_text(const Item& it) {
  std::string o = "[";
  for (size_t k = 0; k < it.shape.size(); ++k) o += (k ? ", " : "") + std::to_string(it.shape[k]);
  return o + "]";
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

bool deepspeed(const Input& in) {
  return in.kind.starts_with("deepspeed");
}

// What diff matches items by: a parameter's name without the known prefixes, and its state. A
// hyper-parameter's group is matched by the parameters it holds (prefixes stripped, in any
// order), never by its index alone: two formats may number the same groups differently.
class ItemKeys {
 public:
  std::string group(const Item& it) {
    std::string& k = groups_[it.members.get()];
    if (k.empty()) {
      std::vector<std::string> names;
      for (const auto& m : *it.members) names.push_back(canonical_param(m));
      std::sort(names.begin(), names.end());
      std::string all;
      for (const auto& n : names) all += n + "\n";
      char h[32];
      std::snprintf(h, sizeof h, "#%016zx", std::hash<std::string>{}(all));
      k = "group " + std::to_string(names.size()) + h;
    }
    return k;
  }
  std::string operator()(const Item& it) {
    return (it.members ? group(it) : canonical_param(it.param)) + "\n" + it.state;
  }
  // How a row names a group: by its first parameter.
  static std::string label(const Item& it) {
    const auto& m = *it.members;
    if (m.empty()) return "param group " + std::to_string(it.group) + " (no parameters)";
    return "group of " + canonical_param(m[0]) + (m.size() > 1 ? " +" + std::to_string(m.size() - 1) : "");
  }

 private:
  std::map<const std::vector<std::string>*, std::string> groups_;
};

// Compares one pair block by block; fills the row's figures and status.
void compare(const Item& a, const Item& b, const Input& ia, const Input& ib, const DiffOptions& o, DiffRow& row) {
  const bool scalar = a.value || b.value;
  // A flat 1-D copy of a shaped tensor (ds_to_universal's ZeRO-3 files) holds the same elements:
  // compared, and the match says so; any other shape difference is one.
  const bool flat = (a.shape.size() == 1) != (b.shape.size() == 1) && a.numel() == b.numel();
  if (!scalar && a.shape != b.shape && !flat) {
    row.status = "shape";
    return;
  }
  if (a.numel() != b.numel()) {
    row.status = "shape";
    return;
  }
  double sa = 0, sb = 0, max_abs = 0, max_rel = 0;
  uint64_t differing = 0;
  bool bit_equal = !scalar && a.dtype == b.dtype;
  const auto one = [&](double x, double y) {
    sa += x * x;
    sb += y * y;
    if (std::isnan(x) && std::isnan(y)) return;
    const double d = std::fabs(x - y);
    const double rel = d == 0 ? 0 : y != 0 ? d / std::fabs(y) : INFINITY;
    if (std::isnan(d)) {
      max_abs = max_rel = INFINITY;
      ++differing;
      return;
    }
    max_abs = std::max(max_abs, d);
    max_rel = std::max(max_rel, rel);
    if (!(d <= o.atol + o.rtol * std::fabs(y))) ++differing;
  };
  if (scalar) {
    const auto value_of = [&](const Item& it, const Input& in) {
      if (it.value) return *it.value;
      std::vector<float> f;
      std::vector<double> d;
      ValueBlocks v(it, in.files);
      if (v.next(f, d) != 1) return double(NAN);
      return v.wide() ? d[0] : double(f[0]);
    };
    one(value_of(a, ia), value_of(b, ib));
  } else {
    ValueBlocks va(a, ia.files), vb(b, ib.files);
    std::vector<float> fa, fb;
    std::vector<double> da, db;
    for (size_t n; (n = va.next(fa, da)) > 0;) {
      if (vb.next(fb, db) != n) throw Error(b.stored + ": short read", EIO);
      if (bit_equal && std::memcmp(va.raw().data(), vb.raw().data(), va.raw().size()) == 0) {
        for (size_t i = 0; i < n; ++i) {
          const double x = va.wide() ? da[i] : double(fa[i]);
          sa += x * x;
        }
        continue;
      }
      bit_equal = false;
      for (size_t i = 0; i < n; ++i) one(va.wide() ? da[i] : double(fa[i]), vb.wide() ? db[i] : double(fb[i]));
    }
    if (bit_equal) sb = sa;
  }
  row.norm_a = std::sqrt(sa);
  row.norm_b = std::sqrt(sb);
  row.max_abs = max_abs;
  row.max_rel = max_rel;
  row.differing = differing;
  if (!scalar && a.dtype != b.dtype)
    row.status = "dtype";
  else
    row.status = bit_equal || (scalar && !differing && max_abs == 0) ? "equal" : differing ? "differs" : "close";
}

}  // namespace

std::string canonical_param(const std::string& name, std::string* stripped) {
  std::string n = name;
  for (bool again = true; again;) {
    again = false;
    for (const char* p : kPrefixes)
      if (n.starts_with(p) && n.size() > std::strlen(p)) {
        if (stripped) *stripped += std::string(stripped->empty() ? "" : ", ") + "'" + p + "'";
        n = n.substr(std::strlen(p));
        again = true;
      }
  }
  return n;
}

size_t DiffResult::differences() const {
  return size_t(std::count_if(rows.begin(), rows.end(), [](const DiffRow& r) { return r.counts(); }));
}

DiffResult diff(const std::string& a, const std::string& b, const DiffOptions& o) {
  DiffResult r;
  r.a = a;
  r.b = b;
  Findings fa, fb;
  const auto ia = open_input(a, o.tag_a, fa);
  const auto ib = open_input(b, o.tag_b, fb);
  r.kind_a = ia->kind;
  r.kind_b = ib->kind;
  // An optimizer.pt that names no parameters is named by the other side's numbering.
  for (auto [x, y, side] : {std::tuple{ia.get(), ib.get(), "A"}, std::tuple{ib.get(), ia.get(), "B"}})
    if (x->unnamed_ids && !y->unnamed_ids) {
      std::string said;
      (name_torch_ids(*x, *y, said) ? r.matches : r.notes).push_back(std::string(side) + ": " + said);
    }
  // Which states both formats can hold: a weights file holds no moments, a universal folder no
  // buffers, only a DeepSpeed tag a 16-bit module beside its masters.
  const bool optim = ia->holds_optimizer && ib->holds_optimizer;
  const bool others = ia->holds_others && ib->holds_others;
  const auto has_state = [](const Input& in, const std::string& s) {
    return std::any_of(in.items.begin(), in.items.end(), [&](const Item& it) { return it.state == s; });
  };
  const bool module = has_state(*ia, kModule) && has_state(*ib, kModule);
  // A format that keeps no step at all (ds_to_universal writes no step.pt for ZeRO-3) says so
  // once; a step missing for some parameters only is a difference.
  const bool step = has_state(*ia, kStep) && has_state(*ib, kStep);
  if (optim && !step && (has_state(*ia, kStep) || has_state(*ib, kStep)))
    r.notes.push_back(std::string(has_state(*ia, kStep) ? "B" : "A") +
                      " holds no step at all (ds_to_universal writes none for ZeRO-3): steps not compared");
  // Hyper-parameters where both keep them (a universal folder's groups name no parameters).
  const bool hypers = optim && ia->holds_hypers && ib->holds_hypers;
  if (optim && !hypers && (ia->holds_hypers || ib->holds_hypers))
    r.notes.push_back(std::string(ia->holds_hypers ? "B" : "A") +
                      " keeps no param groups by their parameters: hyper-parameters not compared");
  const auto compared = [&](const Item& it) {
    if (it.members) return hypers;
    if (it.state == kModule) return module;
    if (it.state == kStep && !step) return false;
    if (!it.trainable && !others) return false;
    return optim || it.state == kWeight;
  };
  if (!optim)
    r.notes.push_back(std::string(ia->holds_optimizer ? "B" : "A") +
                      " is a weights format (no optimizer state): weights compared, optimizer states not");
  if (!others)
    r.notes.push_back("a universal folder keeps buffers and frozen parameters in its model-state file: not compared");
  ItemKeys key_of;
  std::set<std::string> groups_a, groups_b;  // the param groups each side keeps, by key
  const auto index = [&](const Input& in, const char* side) {
    std::map<std::string, size_t> m;
    size_t dup = 0;
    for (size_t k = 0; k < in.items.size(); ++k) {
      if (in.items[k].members) (side[0] == 'A' ? groups_a : groups_b).insert(key_of.group(in.items[k]));
      if (!m.emplace(key_of(in.items[k]), k).second) ++dup;
    }
    if (dup)
      r.notes.push_back(std::string(side) + " holds " + std::to_string(dup) +
                        " item(s) twice (two files of one kind?): the first of each compared");
    return m;
  };
  const auto ma = index(*ia, "A"), mb = index(*ib, "B");
  std::vector<std::pair<int64_t, int64_t>> pairs;  // in A's order, then B's own
  for (size_t k = 0; k < ia->items.size(); ++k) {
    const Item& x = ia->items[k];
    const std::string key = key_of(x);
    if (ma.at(key) != k) continue;
    const auto j = mb.find(key);
    pairs.emplace_back(int64_t(k), j == mb.end() ? -1 : int64_t(j->second));
  }
  for (size_t k = 0; k < ib->items.size(); ++k) {
    const std::string key = key_of(ib->items[k]);
    if (mb.at(key) == k && !ma.count(key)) pairs.emplace_back(-1, int64_t(k));
  }
  const size_t head = r.matches.size();  // group matches go first, after the ids' naming
  size_t skipped = 0;
  std::set<std::string> one_sided;  // hyper-parameters one optimizer class has and the other lacks
  std::set<std::pair<int, int>> group_pairs;
  for (const auto& [ka, kb] : pairs) {
    const Item* x = ka >= 0 ? &ia->items[size_t(ka)] : nullptr;
    const Item* y = kb >= 0 ? &ib->items[size_t(kb)] : nullptr;
    if ((x && !compared(*x)) || (y && !compared(*y))) {
      ++skipped;
      continue;
    }
    // A key only one side's optimizer keeps (torch's foreach, DeepSpeed's bias_correction) in a
    // group both keep: said, not a difference. A group the other side lacks is one.
    if (const Item* h = x ? x : y; h->members && !(x && y) && (x ? groups_b : groups_a).count(key_of.group(*h))) {
      one_sided.insert(std::string(x ? "A" : "B") + " '" + h->state + "'");
      continue;
    }
    if (x && y && x->members) group_pairs.emplace(x->group, y->group);
    DiffRow row;
    row.param = (x ? x : y)->members ? ItemKeys::label(x ? *x : *y) : canonical_param(x ? x->param : y->param);
    row.state = x ? x->state : y->state;
    if (x)
      row.stored_a = x->stored, row.shape_a = shape_text(*x),
      row.dtype_a = x->value ? "number" : std::string(pt::dtype_name(x->dtype));
    if (y)
      row.stored_b = y->stored, row.shape_b = shape_text(*y),
      row.dtype_b = y->value ? "number" : std::string(pt::dtype_name(y->dtype));
    if (!x || !y) {
      row.status = x ? "missing in B" : "missing in A";
    } else if (!x->unread.empty() || !y->unread.empty()) {
      row.status = "unread";
    } else {
      compare(*x, *y, *ia, *ib, o, row);
      std::string sa, sb;
      canonical_param(x->param, &sa);
      canonical_param(y->param, &sb);
      std::string why;
      if (x->param != y->param)
        why = "prefix " + (sa.empty() ? std::string() : sa + " stripped from A") +
              (sb.empty() ? std::string() : std::string(sa.empty() ? "" : ", ") + sb + " stripped from B");
      if (row.state == kWeight && x->trainable && y->trainable && deepspeed(*ia) != deepspeed(*ib))
        why += std::string(why.empty() ? "" : "; ") + "DeepSpeed's fp32 master ~ a model weight";
      else if (deepspeed(*ia) != deepspeed(*ib) && row.state != kWeight && !x->members)
        why +=
            std::string(why.empty() ? "" : "; ") + "DeepSpeed's partitioned " + row.state + " ~ torch's " + row.state;
      if (x->shape != y->shape && !x->value && !y->value && row.status != "shape")
        why +=
            std::string(why.empty() ? "" : "; ") + "one side keeps it flat (1-D), as ds_to_universal does for ZeRO-3";
      if (!why.empty()) r.matches.push_back("A '" + x->stored + "' ~ B '" + y->stored + "': " + why);
    }
    r.rows.push_back(std::move(row));
  }
  if (skipped)
    r.notes.push_back(std::to_string(skipped) + " item(s) of states the other side cannot hold: not compared");
  for (auto it = group_pairs.rbegin(); it != group_pairs.rend(); ++it)
    r.matches.insert(r.matches.begin() + std::ptrdiff_t(head),
                     "A param group " + std::to_string(it->first) + " ~ B param group " + std::to_string(it->second) +
                         ": the same parameters (groups are matched by the parameters they hold)");
  if (!one_sided.empty()) {
    std::string m;
    for (const auto& k : one_sided) m += (m.empty() ? "" : ", ") + k;
    r.notes.push_back("hyper-parameters only one side's optimizer keeps, not compared: " + m);
  }
  // The records' CRCs, from what the comparison read (and what it did not, read now).
  ia->files.settle_crcs(fa);
  ib->files.settle_crcs(fb);
  for (const auto* x : {&fa, &fb})
    if (x->worst() != Severity::Pass)
      r.notes.push_back(std::string(x == &fa ? "A" : "B") + " has " + std::to_string(x->findings.size()) +
                        " structure finding(s): run zeromount verify " + x->input);
  return r;
}

std::string text(const DiffResult& r) {
  std::string o = "A: " + r.a + " (" + r.kind_a + ")\nB: " + r.b + " (" + r.kind_b + ")\n";
  char line[512];
  // The state column fits the longest state (a hyper-parameter such as decoupled_weight_decay).
  int sw = 11;
  for (const auto& row : r.rows) sw = std::max(sw, int(std::min<size_t>(row.state.size(), 40)));
  std::snprintf(line, sizeof line, "  %-36s %-*s %-12s %-22s %-11s %-11s %-11s %-11s\n", "parameter", sw, "state",
                "status", "shape dtype", "max_abs", "max_rel", "norm_a", "norm_b");
  o += line;
  for (const auto& row : r.rows) {
    std::string sd =
        (row.shape_a.empty() ? row.shape_b : row.shape_a) + " " + (row.dtype_a.empty() ? row.dtype_b : row.dtype_a);
    if (!row.shape_a.empty() && !row.shape_b.empty() && (row.shape_a != row.shape_b || row.dtype_a != row.dtype_b))
      sd = row.shape_a + " " + row.dtype_a + " vs " + row.shape_b + " " + row.dtype_b;
    const bool figures =
        row.status == "equal" || row.status == "close" || row.status == "differs" || row.status == "dtype";
    std::snprintf(line, sizeof line, "  %-36s %-*s %-12s %-22s %-11s %-11s %-11s %-11s\n", row.param.c_str(), sw,
                  row.state.c_str(), row.status.c_str(), sd.c_str(), figures ? num(row.max_abs).c_str() : "-",
                  figures ? num(row.max_rel).c_str() : "-", figures ? num(row.norm_a).c_str() : "-",
                  figures ? num(row.norm_b).c_str() : "-");
    o += line;
  }
  for (size_t k = 0; k < r.matches.size() && k < kShown; ++k) o += "  match: " + r.matches[k] + "\n";
  if (r.matches.size() > kShown)
    o += "  ... and " + std::to_string(r.matches.size() - kShown) + " more matches (--json)\n";
  for (const auto& n : r.notes) o += "  note: " + n + "\n";
  o += std::to_string(r.rows.size()) + " compared, " + std::to_string(r.differences()) + " difference(s) (exit " +
       std::to_string(r.exit_code()) + ")\n";
  return o;
}

std::string json(const DiffResult& r) {
  const auto jnum = [](double v) {
    return std::isfinite(v) ? num(v) : std::string(std::isnan(v) ? "\"nan\"" : "\"inf\"");
  };
  std::string o = "{\"a\": " + pt::json_escape(r.a) + ", \"b\": " + pt::json_escape(r.b) +
                  ", \"kind_a\": " + pt::json_escape(r.kind_a) + ", \"kind_b\": " + pt::json_escape(r.kind_b) +
                  ", \"differences\": " + std::to_string(r.differences()) + ", \"rows\": [";
  for (size_t k = 0; k < r.rows.size(); ++k) {
    const auto& w = r.rows[k];
    o += std::string(k ? ", " : "") + "{\"param\": " + pt::json_escape(w.param) +
         ", \"state\": " + pt::json_escape(w.state) + ", \"status\": " + pt::json_escape(w.status) +
         ", \"stored_a\": " + pt::json_escape(w.stored_a) + ", \"stored_b\": " + pt::json_escape(w.stored_b) +
         ", \"shape_a\": " + pt::json_escape(w.shape_a) + ", \"shape_b\": " + pt::json_escape(w.shape_b) +
         ", \"dtype_a\": " + pt::json_escape(w.dtype_a) + ", \"dtype_b\": " + pt::json_escape(w.dtype_b) +
         ", \"max_abs\": " + jnum(w.max_abs) + ", \"max_rel\": " + jnum(w.max_rel) + ", \"norm_a\": " + jnum(w.norm_a) +
         ", \"norm_b\": " + jnum(w.norm_b) + ", \"differing\": " + std::to_string(w.differing) + "}";
  }
  o += "], \"matches\": [";
  for (size_t k = 0; k < r.matches.size(); ++k) o += std::string(k ? ", " : "") + pt::json_escape(r.matches[k]);
  o += "], \"notes\": [";
  for (size_t k = 0; k < r.notes.size(); ++k) o += std::string(k ? ", " : "") + pt::json_escape(r.notes[k]);
  return o + "]}\n";
}

std::string html(const DiffResult& r) {
  const auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
    return o;
  };
  std::string o =
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>zeromount diff</title><style>"
      "body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left}.bad{color:#b3261e}"
      "</style></head><body><h1>diff</h1><p>A: " +
      esc(r.a) + " (" + esc(r.kind_a) + ")<br>B: " + esc(r.b) + " (" + esc(r.kind_b) + ")</p><p>" +
      std::to_string(r.rows.size()) + " compared, " + std::to_string(r.differences()) +
      " difference(s)</p><table><tr><th>parameter</th><th>state</th><th>status</th><th>A</th><th>B</th>"
      "<th>max_abs</th><th>max_rel</th><th>norm_a</th><th>norm_b</th></tr>";
  for (const auto& w : r.rows)
    o += std::string("<tr") + (w.counts() ? " class=\"bad\"" : "") + "><td>" + esc(w.param) + "</td><td>" +
         esc(w.state) + "</td><td>" + esc(w.status) + "</td><td>" + esc(w.shape_a + " " + w.dtype_a) + "</td><td>" +
         esc(w.shape_b + " " + w.dtype_b) + "</td><td>" + num(w.max_abs) + "</td><td>" + num(w.max_rel) + "</td><td>" +
         num(w.norm_a) + "</td><td>" + num(w.norm_b) + "</td></tr>";
  o += "</table><h2>matches</h2><ul>";
  for (const auto& m : r.matches) o += "<li>" + esc(m) + "</li>";
  o += "</ul><h2>notes</h2><ul>";
  for (const auto& n : r.notes) o += "<li>" + esc(n) + "</li>";
  return o + "</ul></body></html>\n";
}

}  // namespace zm::check
