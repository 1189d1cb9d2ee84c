// The report page's Experts section (include/zeromount/view/files/report_experts.h).
#include "zeromount/view/files/report_experts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "zeromount/pt/text.h"
#include "zeromount/view/files/number_rules.h"
#include "zeromount/view/files/report_html.h"

namespace zm::view {

namespace {

using html::coord;
using html::escape;

constexpr size_t kAxisLabel = 64;  // px left of the bars, as the layer charts
constexpr double kHeight = 100;

std::string factor_text() {
  char b[16];
  snprintf(b, sizeof b, "%g", kOutlierFactor);
  return b;
}

const char* yes_no(bool b) {
  return b ? "yes" : " no";  // one width either way
}

// One packed parameter: a bar per expert, red where the verdict flags it.
std::string expert_chart(const ds::Param& p, uint64_t experts, const ParamFigures* pf) {
  ExpertOutliers o;
  std::vector<bool> quiet(experts);  // exp_avg_sq all zero: no gradient reached it
  if (pf) {
    o = expert_outliers(pf->expert_weights.sumsq(), pf->expert_weights.per_expert());
    if (o.rms.empty())  // fewer than kMinSiblings experts: shown, not judged
      for (double s : pf->expert_weights.sumsq())
        o.rms.push_back(std::sqrt(s / double(std::max<uint64_t>(pf->expert_weights.per_expert(), 1))));
    for (size_t e : experts_without_gradient(pf->expert_moment.sumsq()))
      if (e < experts) quiet[e] = true;
  }
  const auto rms = [&](size_t e) { return e < o.rms.size() ? o.rms[e] : 0.0; };
  double most = 0;
  for (size_t e = 0; e < experts; ++e)
    if (std::isfinite(rms(e))) most = std::max(most, rms(e));
  const size_t slot = std::clamp<size_t>(600 / experts, 3, 14);
  const size_t width = std::max<size_t>(slot * experts, 200) + kAxisLabel;
  std::string svg = "<figure><svg width=\"" + std::to_string(width) + "\" height=\"104\" viewBox=\"0 0 " +
                    std::to_string(width) + " 104\"><line class=\"ax\" x1=\"" + std::to_string(kAxisLabel) +
                    "\" y1=\"100.5\" x2=\"" + std::to_string(width) + "\" y2=\"100.5\"/><text x=\"" +
                    std::to_string(kAxisLabel - 4) + "\" y=\"9\" class=\"lg\">" +
                    html::axis_labels(0, pf ? most : NAN, 10).second + "</text>";
  for (size_t e = 0; e < experts; ++e) {
    const bool out = e < o.outlier.size() && o.outlier[e];
    const bool no_gradient = quiet[e];
    const double h = most > 0 && std::isfinite(rms(e)) ? std::max(1.0, kHeight * rms(e) / most) : 0;
    const double norm = pf ? std::sqrt(pf->expert_weights.sumsq()[e]) : 0;
    svg += "<rect x=\"" + std::to_string(kAxisLabel + e * slot) + "\" y=\"" + coord(kHeight - h, kHeight) +
           "\" width=\"" + std::to_string(std::max<size_t>(slot - 1, 2)) + "\" height=\"" + coord(h, kHeight) +
           "\" class=\"" + html::flag(out || no_gradient) + "\"><title>" + escape(expert_subject(p.name, e)) +
           ": RMS " + stat_text(rms(e)) + ", L2 norm " + stat_text(norm) + "; norm-outlier " + yes_no(out) +
           "; exp_avg_sq all zero " + yes_no(no_gradient) + "</title></rect>";
  }
  return svg + "</svg><figcaption>" + escape(p.name) + " " + pt::shape_text(p.shape) + ": RMS per expert (dim 0, " +
         std::to_string(experts) + " experts), median " + stat_text(pf ? o.median : NAN) + "; red: more than " +
         factor_text() + " times the median or under 1/" + factor_text() +
         " of it, or exp_avg_sq all zero</figcaption></figure>\n";
}

}  // namespace

std::string experts_section(const ds::TagIndex& ix, const TagFigures* f) {
  std::string charts;
  for (size_t k = 0; k < ix.params.size(); ++k)
    if (const uint64_t e = packed_experts(ix.params[k].name, ix.params[k].shape))
      charts += expert_chart(ix.params[k], e, f && k < f->params.size() ? &f->params[k] : nullptr);
  if (charts.empty()) return "";
  return "<h2 id=\"experts\">Experts</h2>\n<p class=\"note\">Packed expert parameters (a name with an "
         "<code>experts</code> component not followed by a number, 3 or more dims, dim 0 the expert: "
         "transformers 5's <code>gate_up_proj</code> and <code>down_proj</code>, AutoEP's <code>w1</code>): one bar "
         "per expert of the RMS of its slice, sqrt(sum of squares / elements), of the finite fp32 values. With " +
         std::to_string(kMinSiblings) +
         " or more experts, <code>norm-outlier</code> flags an expert whose RMS is more than " + factor_text() +
         " times the experts' median or less than 1/" + factor_text() +
         " of it (one left at its initialisation, reset, or diverged), and "
         "<code>moments-not-reset</code> one whose exp_avg_sq is all zero after a step (no gradient ever reached "
         "it). A bar's title gives its numbers as <code>&lt;param&gt;/info</code> prints them.</p>\n" +
         charts;
}

}  // namespace zm::view
