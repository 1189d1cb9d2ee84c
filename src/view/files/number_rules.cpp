#include "zeromount/view/files/number_rules.h"

#include <algorithm>
#include <cmath>

namespace zm::view {

std::string sibling_key(const std::string& name) {
  std::string out;
  size_t k = 0;
  while (k < name.size()) {
    const size_t dot = name.find('.', k);
    const std::string part = name.substr(k, dot == std::string::npos ? std::string::npos : dot - k);
    const bool numeric =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    out += (out.empty() && k == 0 ? "" : ".") + (numeric ? std::string("*") : part);
    if (dot == std::string::npos) break;
    k = dot + 1;
  }
  return out;
}

double norm_outliers(const std::vector<double>& rms, std::vector<bool>& outlier) {
  std::vector<double> sorted = rms;
  std::nth_element(sorted.begin(), sorted.begin() + long(sorted.size() / 2), sorted.end());
  const double median = sorted[sorted.size() / 2];
  outlier.assign(rms.size(), false);
  for (size_t j = 0; j < rms.size(); ++j)
    outlier[j] = rms[j] > kOutlierFactor * median || rms[j] * kOutlierFactor < median;
  return median;
}

uint64_t packed_experts(const std::string& name, const std::vector<int64_t>& shape) {
  if (shape.size() < 3 || shape[0] < 2 || uint64_t(shape[0]) > kMaxPackedExperts) return 0;
  const std::string key = "." + sibling_key(name) + ".";
  // "experts" then a component that is not a number (sibling_key wrote numbers as "*").
  for (size_t at = key.find(".experts."); at != std::string::npos; at = key.find(".experts.", at + 1))
    if (key.compare(at + 9, 2, "*.") != 0 && at + 9 < key.size()) return uint64_t(shape[0]);
  return 0;
}

std::string expert_subject(const std::string& param, size_t expert) {
  return param + " expert " + std::to_string(expert);
}

ExpertOutliers expert_outliers(const std::vector<double>& sumsq, uint64_t per_expert) {
  ExpertOutliers o;
  if (sumsq.size() < kMinSiblings || !per_expert) return o;
  for (double s : sumsq) o.rms.push_back(std::sqrt(s / double(per_expert)));
  o.median = norm_outliers(o.rms, o.outlier);
  return o;
}

std::vector<size_t> experts_without_gradient(const std::vector<double>& moment_sumsq) {
  std::vector<size_t> out;
  for (size_t e = 0; e < moment_sumsq.size(); ++e)
    if (moment_sumsq[e] == 0) out.push_back(e);
  if (out.size() == moment_sumsq.size()) out.clear();
  return out;
}

}  // namespace zm::view
