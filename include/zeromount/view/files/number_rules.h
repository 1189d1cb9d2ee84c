#pragma once
// The number rules that `zeromount verify` (check/numbers.cpp) and a tag's report page
// (report_verdict.h) both apply to statistics: one definition of each.
#include <cmath>
#include <cstddef>
#include <cstdint>
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

// Packed experts: transformers 5 keeps a MoE layer's experts in one parameter at run time
// ("model.layers.0.mlp.experts.gate_up_proj" [E, 2I, H], "...experts.down_proj" [E, H, I]), and so
// does DeepSpeed's AutoEP ("...experts.w1"); a DeepSpeed checkpoint of such a run holds those names.
// A parameter is taken as E packed experts when its name has an "experts" component that is not
// followed by a number (an unpacked "experts.5.w1" is a sibling instead), it has 3 or more dims,
// and dim 0 is in [2, kMaxPackedExperts]: then expert e is the contiguous slice [e * numel / E,
// (e + 1) * numel / E) of its flat elements. The name decides, not config.json: verify reads
// checkpoints without one, and the run-time names are what transformers and AutoEP write. It is
// wrong for a 3-D parameter under an "experts" module whose dim 0 is not the expert (none in
// transformers 5's table), and it misses packed 2-D biases ([E, 2I], GPT-OSS) and experts under
// another module name. The cap keeps the per-expert sums (one double each) small; the largest
// public MoE has 384 experts per layer.
inline constexpr uint64_t kMaxPackedExperts = 4096;
// E, or 0 when the parameter is not packed experts.
uint64_t packed_experts(const std::string& name, const std::vector<int64_t>& shape);

// How a finding names expert e of a packed parameter: "<param> expert <e>".
std::string expert_subject(const std::string& param, size_t expert);

// The norm-outlier rule applied to the experts of one packed parameter (siblings by another
// layout): each expert's RMS over its slice, sqrt(sumsq[e] / per_expert), against the median of
// all of them, as norm_outliers does. Empty `rms` when there are fewer than kMinSiblings experts.
struct ExpertOutliers {
  std::vector<double> rms;
  std::vector<bool> outlier;
  double median = NAN;
};
ExpertOutliers expert_outliers(const std::vector<double>& sumsq, uint64_t per_expert);

// The experts of one packed parameter whose exp_avg_sq slice is all zero (its sum of squares is 0:
// no finite value squares to 0 in double unless it is 0): Adam's second moment stays zero only
// while every gradient has been zero, so after a step such an expert has never had a token routed
// to it (or its gradient was cut). None when every expert is zero: the parameter's own
// moments-not-reset finding says that.
std::vector<size_t> experts_without_gradient(const std::vector<double>& moment_sumsq);

}  // namespace zm::view
