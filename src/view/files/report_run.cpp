// report.html across tags: per layer, the weight norm, the update size, the mean exp_avg_sq and
// the weights' relative change, against the step (include/zeromount/view/files/report_run.h).
#include "zeromount/view/files/report_run.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "zeromount/ds/inspect.h"
#include "zeromount/pt/text.h"
#include "zeromount/view/files/report_html.h"

namespace zm::view {

namespace {

using html::coord;
using html::escape;

constexpr double kWidth = 180, kHeight = 40, kPad = 4, kLabels = 54;  // the scale's labels left of the line

enum Metric { Norm, Update, Moment, Change };
constexpr const char* kMetricName[] = {"weight norm", "update size (mean)", "exp_avg_sq mean",
                                       "relative change from the tag before"};

// What one line shows at one tag, NaN where there is nothing (or nothing finite) to show.
struct Point {
  double value = NAN;
  bool bad = false;  // values that are not finite went into it
};

Point point(Metric m, const LayerFigures& l, const ChangeFigures* change, size_t layer) {
  switch (m) {
    case Norm:
      return {l.weights.l2(), l.weights.nan + l.weights.inf > 0};
    case Update:
      return {l.update.average(), l.update.nan + l.update.inf > 0};
    case Moment:
      return {l.moment.average(), l.moment.nan + l.moment.inf > 0};
    case Change:
      break;
  }
  // No value where the two tags hold the layer differently (a parameter frozen, renamed or
  // reshaped) or where it was all zeros before; red only where values were not finite.
  if (!change || !change->comparable.at(layer)) return {};
  const double diff = change->diff_sumsq.at(layer), before = change->prev_sumsq.at(layer);
  if (!std::isfinite(diff) || !std::isfinite(before)) return {NAN, true};
  if (before == 0) return {};
  return {std::sqrt(diff) / std::sqrt(before), false};
}

// One small line chart: a point per tag, each with its tag, step and value in its title.
std::string sparkline(Metric m, const std::string& layer, const std::vector<NamedTag>& tags,
                      const std::vector<double>& steps, const std::vector<double>& x,
                      const std::vector<Point>& points) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Point& p : points)
    if (std::isfinite(p.value)) lo = std::min(lo, p.value), hi = std::max(hi, p.value);
  std::string path, marks;
  bool pen = false;
  for (size_t k = 0; k < points.size(); ++k) {
    const Point& p = points[k];
    const bool shown = std::isfinite(p.value);
    const double y = !shown    ? kHeight - kPad
                     : hi > lo ? kPad + (kHeight - 2 * kPad) * (1 - (p.value - lo) / (hi - lo))
                               : kHeight / 2;
    const std::string cx = coord(kLabels + kPad + (kWidth - 2 * kPad) * x[k], kLabels + kWidth), cy = coord(y, kHeight);
    path += std::string(pen && shown ? "L" : "M") + cx + "," + cy;  // a gap where a value is missing
    pen = shown;
    // A point with no value (a first tag's change, a layer a tag lacks or holds otherwise) is not drawn; one that went
    // through values that are not finite is red, at the bottom when it is not a number itself.
    marks += "<circle cx=\"" + cx + "\" cy=\"" + cy + "\" r=\"2\" class=\"" +
             (p.bad   ? "b"
              : shown ? "g"
                      : "n") +
             "\"><title>" + escape(tags[k].path) + " (step " + html::step_text(steps[k]) + "): " + stat_text(p.value) +
             "</title></circle>";
  }
  const auto [bottom, top] = html::axis_labels(lo, hi, 10);
  return "<svg width=\"234\" height=\"40\" viewBox=\"0 0 234 40\"><title>" + escape(kMetricName[m]) + " of " +
         escape(layer) + ": " + stat_text(std::isfinite(lo) ? lo : NAN) + " to " +
         stat_text(std::isfinite(hi) ? hi : NAN) + "</title><text x=\"50\" y=\"10\" class=\"lg\">" + top +
         "</text><text x=\"50\" y=\"38\" class=\"lg\">" + bottom +
         "</text><line class=\"ax\" x1=\"54.5\" y1=\"2\" x2=\"54.5\" y2=\"38\"/><path class=\"l\" d=\"" + path +
         "\"/>" + marks + "</svg>";
}

}  // namespace

std::string run_report(const std::string& title, const std::vector<NamedTag>& tags,
                       const std::vector<std::string>& left_out, const RunFigures* f) {
  // Each tag's layers (module order once computed), and the union of their names, newest first.
  std::vector<std::vector<LayerFigures>> layers;
  for (size_t k = 0; k < tags.size(); ++k) layers.push_back(f ? f->tags[k]->layers : report_layers(*tags[k].tag));
  std::vector<std::string> names;
  std::vector<std::map<std::string, size_t>> at(tags.size());
  for (size_t k = tags.size(); k-- > 0;)
    for (size_t l = 0; l < layers[k].size(); ++l) {
      if (std::none_of(at.begin(), at.end(), [&](const auto& m) { return m.count(layers[k][l].name); }))
        names.push_back(layers[k][l].name);
      at[k][layers[k][l].name] = l;
    }
  // x: the step where every tag has one and they grow in training order, else the position.
  std::vector<double> steps, x;
  bool by_step = f && !tags.empty();
  for (size_t k = 0; k < tags.size(); ++k) {
    steps.push_back(f ? f->tags[k]->step : NAN);
    by_step = by_step && std::isfinite(steps[k]) && (k == 0 || steps[k] > steps[k - 1]);
  }
  for (size_t k = 0; k < tags.size(); ++k)
    x.push_back(tags.size() < 2 ? 0.5
                : by_step       ? (steps[k] - steps.front()) / (steps.back() - steps.front())
                                : double(k) / double(tags.size() - 1));

  uint64_t expected = 0, bytes = 0;
  double seconds = 0;
  std::string table =
      "<table class=\"kv\">\n<tr><td>tag</td><td>step</td><td>stage</td><td>dp</td><td>parameters"
      "</td><td>elements</td></tr>\n";
  for (size_t k = 0; k < tags.size(); ++k) {
    const ds::TagIndex& ix = *tags[k].tag->index;
    const uint64_t numel = ds::trainable_numel(ix);
    const uint64_t es = pt::element_size(ix.master_dtype);
    expected += figure_bytes(ix) + (k ? 2 * numel * es : 0);
    if (f) {
      bytes += f->tags[k]->bytes_read + (k ? f->change[k]->bytes_read : 0);
      seconds += f->tags[k]->seconds + (k ? f->change[k]->seconds : 0);
    }
    table += "<tr><td><code>" + escape(tags[k].path) + "</code></td><td class=\"v\">" + html::step_text(steps[k]) +
             "</td><td>" + escape(ds::stage_text(ix)) + "</td><td>" + std::to_string(ix.dp) + "</td><td>" +
             pt::with_commas(ix.params.size()) + "</td><td>" + pt::with_commas(numel) + "</td></tr>\n";
  }
  table += "</table>\n";
  std::string not_shown;  // said before the charts: the table of tags comes after them
  for (const auto& why : left_out) not_shown += "<p class=\"note b\">Not shown: " + escape(why) + "</p>\n";

  std::string grid =
      "<div class=\"t\" style=\"grid-template-columns:repeat(5,auto)\">\n<div class=\"r h\"><span>layer"
      "</span>";
  for (const char* m : kMetricName) grid += std::string("<span>") + m + "</span>";
  grid += "</div>\n";
  for (size_t i = 0; i < names.size(); ++i) {
    grid += "<div class=\"r\" style=\"--o:0\"><span class=\"n\">" + escape(names[i]) + "</span>";
    for (Metric m : {Norm, Update, Moment, Change}) {
      std::vector<Point> points;
      for (size_t k = 0; k < tags.size(); ++k) {
        const auto it = at[k].find(names[i]);
        const bool comparable = m != Change || (k > 0 && at[k - 1].count(names[i]));
        points.push_back(f && it != at[k].end() && comparable &&
                                 (m == Norm || m == Change || has_update(*tags[k].tag->index))
                             ? point(m, layers[k][it->second], f->change[k].get(), it->second)
                             : Point{});
      }
      grid += "<span>" + sparkline(m, names[i], tags, steps, x, points) + "</span>";
    }
    grid += "</div>\n";
  }
  grid += "</div>\n";

  const std::string body =
      "<h1>Report across tags: <code>" + escape(title) + "</code></h1>\n<p class=\"note\">Made up by zeromount from " +
      "the shards: the tags served here now, in training order (a tag saved later joins this page; a deleted one " +
      "leaves it). Per layer (the parameters that share the name up to the first numeric component, or a module), " +
      "against the step (where every tag has one and they grow; else the tag's position): the L2 norm of the finite "
      "fp32 weights, the mean " +
      "of |exp_avg| / (sqrt(exp_avg_sq) + eps), the mean exp_avg_sq, and ||w<sub>t</sub> - w<sub>t-1</sub>|| / " +
      "||w<sub>t-1</sub>|| from the tag before. Each point's title gives its tag, step and value; red points went " +
      "through values that are not finite. <a href=\"#layers\">Layers</a> &middot; <a href=\"#tags\">Tags</a> " +
      "&middot; <a href=\"#cost\">Cost</a></p>\n" + not_shown +
      // The charts first: a run of hundreds of tags has a table of hundreds of rows.
      "<h2 id=\"layers\">Layers</h2>\n" + grid + "<h2 id=\"tags\">Tags</h2>\n" + table +
      "<h2 id=\"cost\">Cost</h2>\n<p class=\"note\">Computed from the " +
      "shards when first needed: one streaming pass per tag (as its <code>_params/report.html</code>) and one over " +
      "the fp32 weights of each pair of consecutive tags: " + html::read_cost(bytes, expected, seconds) +
      "; kept by each tag's identity, so a page opened " +
      "again, or after a new tag, reads only what is new. <code>-o report=off</code>: no report pages.</p>\n";
  return html::page("zeromount report across tags: " + title, body);
}

}  // namespace zm::view
