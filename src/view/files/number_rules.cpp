#include "zeromount/view/files/number_rules.h"

#include <algorithm>

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

}  // namespace zm::view
