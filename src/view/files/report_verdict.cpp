// A tag's verify verdict from its report figures (include/zeromount/view/files/report_verdict.h).
#include "zeromount/view/files/report_verdict.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "zeromount/view/files/number_rules.h"
#include "zeromount/view/files/report_figures.h"

namespace zm::view {

uint8_t Verdict::worst() const {
  uint8_t w = 0;
  for (const auto& c : checks) w = std::max(w, c.result);
  return w;
}

const char* result_name(uint8_t result) {
  return result >= 2 ? "fail" : result == 1 ? "warn" : "pass";
}

namespace {

void found(PageCheck& c, uint8_t result, const std::string& subject) {
  if (!c.findings++) c.first = subject;
  c.result = std::max(c.result, result);
}

// Every element of `numel` finite and zero.
bool all_zero(const Stats& s, uint64_t numel) {
  return numel && s.n == numel && s.min == 0 && s.max == 0;
}

}  // namespace

Verdict tag_verdict(const ds::TagIndex& ix, const TagFigures& f) {
  Verdict v;
  for (const char* name : kPageChecks) v.checks.push_back(PageCheck{name});
  PageCheck &finite = v.checks[0], &nonneg = v.checks[1], &reset = v.checks[2], &outlier = v.checks[3];
  const bool stepped = f.step > 0;
  uint64_t moments = 0, zero = 0;
  std::map<std::string, std::vector<size_t>> siblings;
  for (size_t k = 0; k < ix.params.size() && k < f.params.size(); ++k) {
    const ds::Param& p = ix.params[k];
    const ParamFigures& x = f.params[k];
    ++finite.subjects;
    if (x.weights.nan + x.weights.inf) found(finite, 2, p.name + " " + ix.state_names.front());
    if (p.numel >= 2 && x.weights.n) {
      std::string key = sibling_key(p.name) + "|";
      for (int64_t d : p.shape) key += std::to_string(d) + ",";
      siblings[key].push_back(k);
    }
    if (!has_update(ix, p)) continue;
    // exp_avg is seen through the update sizes: one is not finite where exp_avg is not (while
    // exp_avg_sq is finite), and all are zero exactly where exp_avg is.
    finite.subjects += 2;
    const bool sq_finite = !(x.moment.nan + x.moment.inf);
    if (!sq_finite) found(finite, 2, p.name + " exp_avg_sq");
    if (sq_finite && x.update.nan + x.update.inf) found(finite, 2, p.name + " exp_avg");
    ++nonneg.subjects;
    if (x.moment.n && x.moment.min < 0) found(nonneg, 2, p.name + " exp_avg_sq");
    reset.subjects += 2;
    moments += 2;
    if (!stepped) continue;
    if (sq_finite && all_zero(x.update, p.numel)) ++zero, found(reset, 1, p.name + " exp_avg");
    if (all_zero(x.moment, p.numel)) ++zero, found(reset, 1, p.name + " exp_avg_sq");
    for (size_t e : experts_without_gradient(x.expert_moment.sumsq()))
      found(reset, 1, expert_subject(p.name, e) + " exp_avg_sq");
  }
  if (moments && zero == moments) reset.result = 2;  // every moment: the optimizer state looks reset
  for (const auto& [key, members] : siblings) {
    if (members.size() < kMinSiblings) continue;
    std::vector<double> rms;
    for (size_t k : members) rms.push_back(f.params[k].weights.l2() / std::sqrt(double(ix.params[k].numel)));
    std::vector<bool> out;
    norm_outliers(rms, out);
    outlier.subjects += members.size();
    for (size_t j = 0; j < members.size(); ++j)
      if (out[j]) found(outlier, 1, ix.params[members[j]].name);
  }
  for (size_t k = 0; k < ix.params.size() && k < f.params.size(); ++k) {  // the experts of one packed parameter
    const ExpertSums& w = f.params[k].expert_weights;
    const ExpertOutliers o = expert_outliers(w.sumsq(), w.per_expert());
    outlier.subjects += o.rms.size();
    for (size_t e = 0; e < o.rms.size(); ++e)
      if (o.outlier[e]) found(outlier, 1, expert_subject(ix.params[k].name, e));
  }
  return v;
}

}  // namespace zm::view
