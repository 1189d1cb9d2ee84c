// <T>_params/report.html: the run, one row per parameter (sortable without a script), the
// layers' bar charts and what the page cost (include/zeromount/view/files/report_page.h).
#include "zeromount/view/files/report_page.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "zeromount/ds/inspect.h"
#include "zeromount/pt/text.h"
#include "zeromount/view/files/number_rules.h"
#include "zeromount/view/files/report_experts.h"
#include "zeromount/view/files/report_html.h"

namespace zm::view {

namespace {

using html::coord;
using html::escape;
using html::fit;

// A per-group value as Python would print it: 0.001, (0.9, 0.999), True.
std::string value_text(const pt::Node* v) {
  if (!v) return "None";
  switch (v->kind) {
    case pt::Kind::Float:
      return pt::format_double(v->f);
    case pt::Kind::Int:
      return std::to_string(v->i);
    case pt::Kind::Bool:
      return v->b ? "True" : "False";
    case pt::Kind::Str:
      return "'" + v->s + "'";
    case pt::Kind::Tuple:
    case pt::Kind::List: {
      std::string s;
      for (const pt::Node* x : v->items) s += (s.empty() ? "" : ", ") + value_text(x);
      return (v->kind == pt::Kind::Tuple ? "(" : "[") + s + (v->kind == pt::Kind::Tuple ? ")" : "]");
    }
    default:
      return std::string(v->kind_name());
  }
}

std::string row(const std::string& key, const std::string& value) {
  return "<tr><td>" + escape(key) + "</td><td>" + value + "</td></tr>\n";
}

std::string run_section(const ds::TagIndex& ix, const TagFigures* f) {
  const uint64_t numel = ds::trainable_numel(ix);
  std::string o = "<h2 id=\"run\">Run</h2>\n<table class=\"kv\">\n";
  o += row("stage", escape(ds::stage_text(ix)));
  o += row("data-parallel size",
           std::to_string(ix.dp) + (ix.parallel() ? " (grid: pp " + std::to_string(ix.pp) + " x tp " +
                                                        std::to_string(ix.tp) + " x dp " + std::to_string(ix.dp) + ")"
                                                  : ""));
  o += row("precision", escape(std::string(pt::dtype_name(ix.master_dtype)) + " master weights and optimizer states; " +
                               std::string(pt::dtype_name(ix.module_dtype)) + " module weights (training precision)"));
  o += row("optimizer",
           escape(std::string(ds::optimizer_class_name(ix.optimizer)) + "; states: " + ds::states_text(ix)));
  o += row("loss scaler", escape(ds::loss_scaler_text(ix.loss_scaler)));
  o += row("step", "<span>" + html::step_text(f && ix.run_step() ? f->step : ix.run_step() ? 0 : NAN) + "</span>");
  std::string groups;
  for (int g = 0; g < ix.num_groups; ++g) {
    uint64_t n = 0, e = 0;
    for (const auto& p : ix.params)
      if (p.group == g) ++n, e += p.numel;
    std::string values;
    const pt::Node* pg =
        ix.param_groups && size_t(g) < ix.param_groups->items.size() ? ix.param_groups->items[size_t(g)] : nullptr;
    for (size_t k = 0; pg && k < pg->entries.size(); ++k)
      if (const auto& [key, v] = pg->entries[k]; key && key->is(pt::Kind::Str) && key->s != "params")
        values += ", " + key->s + " " + value_text(v);
    groups += (g ? "<br>" : "") + escape("group " + std::to_string(g) + ": " + pt::with_commas(n) + " parameters, " +
                                         pt::with_commas(e) + " elements" + values);
  }
  if (ix.stage == 3) groups += "<br>" + std::to_string(ix.scalars.size()) + " sub-groups";
  o += row("param groups", groups);
  o += row("parameters", escape(pt::with_commas(ix.params.size()) + " trainable, " + pt::with_commas(numel) +
                                " elements, " + pt::human_bytes(ix.state_bytes()) + " of fp32 and optimizer state"));
  if (!ix.ds_version.empty()) o += row("DeepSpeed", escape(ix.ds_version));
  return o + "</table>\n";
}

// verify's checks that this page's pass answers (report_verdict.h), each with a fixed width: the
// result in 4 characters, counts in the digits of the most there can be, the first subject padded
// to the longest a parameter's name and state can be.
// `s` then spaces to `width` (a name reads from the left; fit() right-aligns numbers).
std::string left(std::string s, size_t width) {
  const size_t n = s.size();
  return fit(std::move(s), width).substr(width - n) + std::string(width - n, ' ');
}

std::string verify_section(const ds::TagIndex& ix, const TagFigures* f) {
  size_t name_width = 0;
  for (const auto& p : ix.params) {
    name_width = std::max(name_width, escape(p.name).size());
    // A packed parameter's finding names an expert: "<param> expert 12 exp_avg_sq".
    if (const uint64_t e = packed_experts(p.name, p.shape))
      name_width = std::max(name_width, escape(expert_subject(p.name, e - 1)).size());
  }
  const size_t subject_width =
      name_width + 1 + std::max<size_t>(10, ix.state_names.empty() ? 0 : escape(ix.state_names.front()).size());
  const size_t cw = html::digits(3 * ix.params.size());
  const Verdict* v = f ? &f->verdict : nullptr;
  const auto result = [](uint8_t r) {
    return "<b class=\"" + std::string(html::flag(r >= 2)) + "\">" + result_name(r) + "</b>";
  };
  std::string o = "<h2 id=\"verify\">Verify</h2>\n<p class=\"note\">verdict: " +
                  (v ? result(v->worst()) : "<b class=\"g\">" + fit("", 4) + "</b>") +
                  ", from this page's pass by <code>zeromount verify</code>'s rules and names; the checks that need "
                  "other bytes (zip-crc, module-matches-masters, step-agrees, latest, files-open) are left to "
                  "<code>zeromount verify</code>.</p>\n<table class=\"kv\">\n";
  for (size_t k = 0; k < std::size(kPageChecks); ++k) {
    const PageCheck* c = v && k < v->checks.size() ? &v->checks[k] : nullptr;
    o += row(kPageChecks[k], (c ? result(c->result) : "<b class=\"g\">" + fit("", 4) + "</b>") + " " +
                                 html::count(c ? c->findings : 0, cw) + " of " + html::count(c ? c->subjects : 0, cw) +
                                 " found wrong; first: <code>" + left(c ? escape(c->first) : "", subject_width) +
                                 "</code>");
  }
  return o + "</table>\n";
}

constexpr size_t kAxisLabel = 64;  // px left of the bars for the value axis' labels

// A value as an axis shows it: "%.3g" in at most 10 characters, "-" when not finite.
std::string short_stat(double v) {
  char b[32];
  snprintf(b, sizeof b, "%.3g", v);
  return std::isfinite(v) ? fit(b, 10) : fit("-", 10);
}

// A layer's bar label: its name's last part ("model.layers.12" -> "12"), at most 7 characters.
std::string bar_label(const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
  return last.size() > 7 ? last.substr(0, 6) + "~" : last;
}

// One bar per layer, in module order; a layer with values that are not finite is a red bar.
std::string layer_chart(const std::vector<LayerFigures>& layers, const char* what, bool of_update,
                        const TagFigures* f) {
  constexpr double kHeight = 100;
  const size_t slot = std::clamp<size_t>(900 / std::max<size_t>(layers.size(), 1), 3, 14);
  auto value = [&](size_t k) {
    if (!f) return 0.0;
    const LayerFigures& l = f->layers[k];
    return of_update ? l.update.average() : l.weights.l2();
  };
  auto bad = [&](size_t k) {
    if (!f) return false;
    const Stats& s = of_update ? f->layers[k].update : f->layers[k].weights;
    return s.nan + s.inf > 0 || !std::isfinite(value(k));
  };
  // A layer with some values that are not finite still has the norm of its finite ones: its bar
  // shows that height, in red; only a layer with no finite value at all is a full red bar (one
  // NaN used to hide a layer's norm behind a full-height bar).
  double most = 0;
  for (size_t k = 0; k < layers.size(); ++k)
    if (std::isfinite(value(k))) most = std::max(most, value(k));
  // Labelled: the largest value at the top (a fixed-width number, so that the page's size is known
  // before any is read), and under the bars the last part of every few layers' names, no closer
  // than 48 px apart.
  const size_t bars = slot * layers.size(), width = std::max<size_t>(bars, 200) + kAxisLabel;
  std::string o = "<figure><svg width=\"" + std::to_string(width) + "\" height=\"116\" viewBox=\"0 0 " +
                  std::to_string(width) + " 116\"><line class=\"ax\" x1=\"" + std::to_string(kAxisLabel) +
                  "\" y1=\"100.5\" x2=\"" + std::to_string(width) + "\" y2=\"100.5\"/><text x=\"" +
                  std::to_string(kAxisLabel - 4) + "\" y=\"9\" class=\"lg\">" + short_stat(most) + "</text><text x=\"" +
                  std::to_string(kAxisLabel - 4) + "\" y=\"100\" class=\"lg\">0</text>";
  const size_t every = (48 + slot - 1) / slot;
  for (size_t k = 0; k < layers.size(); ++k) {
    const double v = value(k);
    const double h = !std::isfinite(v) ? kHeight : most > 0 ? std::max(1.0, kHeight * v / most) : 0;
    const size_t x = kAxisLabel + k * slot;
    o += "<rect x=\"" + std::to_string(x) + "\" y=\"" + coord(kHeight - h, kHeight) + "\" width=\"" +
         std::to_string(std::max<size_t>(slot - 1, 2)) + "\" height=\"" + coord(h, kHeight) + "\" class=\"" +
         html::flag(bad(k)) + "\"><title>" + escape(layers[k].name) + ": " + stat_text(v) + "</title></rect>";
    if (k % every == 0)
      o += "<text x=\"" + std::to_string(x) + "\" y=\"112\" class=\"bl\">" + escape(bar_label(layers[k].name)) +
           "</text>";
  }
  return o + "</svg><figcaption>" + what + ", one bar per layer in module order (" + escape(layers.front().name) +
         " ... " + escape(layers.back().name) + "); red: values that are not finite</figcaption></figure>\n";
}

// A statistic, short; its title holds it as info prints it (stat_text), after `note`.
std::string number_cell(double v, const std::string& note) {
  char b[40];
  snprintf(b, sizeof b, "%.4e", v);
  return "<span class=\"v\" title=\"" + note + stat_text(v) + "\">" + fit(b, 12) + "</span>";
}

// The sortable columns' headers, in the order of sort_value.
constexpr const char* kSorted[] = {"numel", "norm", "min",           "max",        "mean",           "std",
                                   "NaN",   "inf",  "update median", "update max", "exp_avg_sq mean"};
constexpr size_t kColumns = sizeof(kSorted) / sizeof(kSorted[0]);

double sort_value(const ds::Param& p, const ParamFigures& f, size_t column) {
  switch (column) {
    case 0:
      return double(p.numel);
    case 1:
      return f.weights.l2();
    case 2:
      return f.weights.lowest();
    case 3:
      return f.weights.highest();
    case 4:
      return f.weights.average();
    case 5:
      return f.weights.deviation();
    case 6:
      return double(f.weights.nan);
    case 7:
      return double(f.weights.inf);
    case 8:
      return f.update.n ? GridHistogram::lower(f.median_bucket) : NAN;
    case 9:
      return f.update.highest();
    default:
      return f.moment.average();
  }
}

// ranks[c][k]: parameter k's place in column c, ascending; NaN after every number.
std::vector<std::vector<size_t>> ranks(const ds::TagIndex& ix, const TagFigures* f) {
  const size_t n = ix.params.size();
  std::vector<std::vector<size_t>> out(kColumns, std::vector<size_t>(n, 0));
  if (!f) return out;
  for (size_t c = 0; c < kColumns; ++c) {
    std::vector<size_t> by(n);
    std::iota(by.begin(), by.end(), 0);
    std::vector<double> v(n);
    for (size_t k = 0; k < n; ++k) v[k] = sort_value(ix.params[k], f->params[k], c);
    std::stable_sort(by.begin(), by.end(),
                     [&](size_t a, size_t b) { return std::isnan(v[b]) ? !std::isnan(v[a]) : v[a] < v[b]; });
    for (size_t r = 0; r < n; ++r) out[c][by[r]] = r;
  }
  return out;
}

std::string params_section(const ds::TagIndex& ix, const TagFigures* f, const std::vector<LayerFigures>& layers) {
  const size_t n = ix.params.size();
  uint64_t most = 0;
  for (const auto& p : ix.params) most = std::max(most, p.numel);
  const size_t cw = html::digits(most), rw = html::digits(n ? n - 1 : 0);
  std::string css = "<style>.t{grid-template-columns:repeat(16,auto)}";
  std::string anchors, header =
                           "<div class=\"r h\"><span>parameter</span><span>shape</span><span>fp32 weights</span>"
                           "<span>exp_avg_sq (octaves)</span>";
  for (size_t c = 0; c < kColumns; ++c) {
    const std::string id = "s" + std::to_string(c);
    css += "#" + id + "a:target~.t>.r>*{order:var(--" + id + ")}#" + id + "d:target~.t>.r>*{order:calc(-1*var(--" + id +
           "))}";
    anchors += "<a id=\"" + id + "a\"></a><a id=\"" + id + "d\"></a>";
    header += std::string("<span>") + kSorted[c] + " <a href=\"#" + id + "d\" title=\"sort, largest first\">" +
              "&#9660;</a><a href=\"#" + id + "a\" title=\"sort, smallest first\">&#9650;</a></span>";
  }
  header += "<span>group</span></div>\n";
  const auto rank = ranks(ix, f);
  std::vector<size_t> position(n);  // module order, from the layers (which are in module order)
  size_t at = 0;
  for (const auto& l : layers)
    for (size_t k : l.params) position[k] = at++;
  std::string rows;
  const ParamFigures none;
  for (size_t k = 0; k < n; ++k) {
    const ds::Param& p = ix.params[k];
    const ParamFigures& pf = f ? f->params[k] : none;
    rows += "<div class=\"r\" style=\"--o:" + html::count(position[k], rw);
    for (size_t c = 0; c < kColumns; ++c) rows += ";--s" + std::to_string(c) + ":" + html::count(rank[c][k], rw);
    rows += "\"><span class=\"n\" id=\"p" + std::to_string(k) + "\">" + html::breakable(p.name) + "</span><span>" +
            pt::shape_text(p.shape) + "</span><span>" +
            html::histogram("w", "fp32 weights of " + p.name, f ? &pf.weight_bins : nullptr, cw) + "</span><span>" +
            (has_update(ix, p) ? html::histogram("m", "exp_avg_sq of " + p.name, f ? &pf.moment_bins : nullptr, cw)
                               : std::string("-")) +
            "</span><span class=\"v\">" + pt::with_commas(p.numel) + "</span>";
    for (double v :
         {pf.weights.l2(), pf.weights.lowest(), pf.weights.highest(), pf.weights.average(), pf.weights.deviation()})
      rows += number_cell(f ? v : 0, "");
    for (uint64_t c : {pf.weights.nan, pf.weights.inf})
      rows += "<span class=\"v " + std::string(html::flag(c > 0)) + "\">" + html::count(c, cw) + "</span>";
    if (has_update(ix, p)) {  // not for a Muon parameter: it keeps momentum_buffer
      const double lo = pf.update.n ? GridHistogram::lower(pf.median_bucket) : NAN;
      const double hi = pf.update.n ? GridHistogram::lower(pf.median_bucket + 1) : NAN;
      rows += number_cell(f ? lo : 0, "the median lies in [" + html::exact(lo) + ", " + html::exact(hi) + "): ") +
              number_cell(f ? pf.update.highest() : 0, "") + number_cell(f ? pf.moment.average() : 0, "");
    } else {
      rows += "<span>-</span><span>-</span><span>-</span>";
    }
    rows += "<span>" + std::to_string(p.group) + "</span></div>\n";
  }
  return css + "</style>\n<h2 id=\"params\">Parameters</h2>\n<p class=\"note\">One row per trainable parameter, in " +
         "module order; &#9660; &#9650; in a header sort by that column (<a href=\"#params\">module order</a>). " +
         "Statistics are of the finite fp32 values (norm: L2; std: population); a cell's title gives the value as " +
         "<code>&lt;param&gt;/info</code> prints it. NaN and inf are counted apart. Update: <code>|exp_avg| / "
         "(sqrt(exp_avg_sq) + eps)</code> per " +
         "element, eps of the parameter's group (1e-8 where the group saves none); its median is the bucket of " +
         "the middle value on the 65,536-bucket bfloat16 grid (within 2<sup>-7</sup> of its value; the cell shows " +
         "the bucket's lower edge, its title both edges). Histograms count every value read, no sampling, in " +
         "bins whose edges are grid boundaries (a histogram's title gives every bin's edges and "
         "count).</p>\n<section>" +
         anchors + "\n<div class=\"t\">\n" + header + rows + "</div></section>\n";
}

std::string cost_section(const ds::TagIndex& ix, const TagFigures* f) {
  const uint64_t expected = figure_bytes(ix);
  return "<h2 id=\"cost\">Cost</h2>\n<p class=\"note\">Every figure on this page was computed from the shards "
         "when it was first built, in one streaming pass over the fp32 weights, exp_avg and exp_avg_sq of every "
         "parameter: " +
         html::read_cost(f ? f->bytes_read : 0, expected, f ? f->seconds : 0.0) +
         ". A page is kept once built; a changed shard makes it fail with ESTALE. A mount with "
         "<code>-o report=off</code> has no report pages.</p>\n";
}

}  // namespace

std::string tag_report(const MountedTag& t, const TagFigures* figures) {
  const ds::TagIndex& ix = *t.index;
  const std::vector<LayerFigures> layers = figures ? figures->layers : report_layers(t);
  const std::string experts = experts_section(ix, figures);  // empty without packed experts
  std::string body =
      "<h1>Report of <code>" + escape(ix.tag) + "</code></h1>\n<p class=\"note\">Made up by " +
      "zeromount from the shards of this tag: nothing here is stored. <a href=\"#run\">Run</a> &middot; " +
      "<a href=\"#layers\">Layers</a> &middot; <a href=\"#params\">Parameters</a> &middot; " +
      (experts.empty() ? "" : "<a href=\"#experts\">Experts</a> &middot; ") +
      "<a href=\"#verify\">Verify</a> &middot; <a href=\"#cost\">Cost</a></p>\n" + run_section(ix, figures) +
      verify_section(ix, figures);
  body += "<h2 id=\"layers\">Layers</h2>\n";
  if (!layers.empty()) {
    body += layer_chart(layers, "Weight norm (L2 of the finite fp32 values)", false, figures);
    body += has_update(ix)
                ? layer_chart(layers, "Update size (mean of |exp_avg| / (sqrt(exp_avg_sq) + eps))", true, figures)
                : "<p class=\"note\">No update sizes: the tag holds no exp_avg and exp_avg_sq.</p>\n";
  }
  body += params_section(ix, figures, layers) + experts + cost_section(ix, figures);
  return html::page(ix.tag + " - zeromount report", body);
}

}  // namespace zm::view
