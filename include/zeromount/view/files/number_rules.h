#pragma once
// The number rules that `zeromount verify` (check/numbers.cpp) and a tag's report page
// (report_verdict.h) both apply to statistics: one definition of each.
#include <cstddef>
#include <string>
#include <vector>

namespace zm::view {

// norm-outlier: parameters whose names differ only in their numbers and that have one shape are
// siblings ("layers.3.experts.5.w1" -> "layers.*.experts.*.w1"); with kMinSiblings or more, one
// whose RMS is more than kOutlierFactor times the siblings' median, or less than its inverse, is
// an outlier.
std::string sibling_key(const std::string& name);
inline constexpr size_t kMinSiblings = 4;
inline constexpr double kOutlierFactor = 4;
// The median of `rms` (kMinSiblings or more values), with outlier[k] set for each outlier.
double norm_outliers(const std::vector<double>& rms, std::vector<bool>& outlier);

}  // namespace zm::view
