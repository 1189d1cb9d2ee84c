#pragma once
// The numbers of the report pages (docs/SEMANTICS.md): every number comes from one streaming pass
// per tag (and one per pair of consecutive tags for the weights' change), made when a page is first
// built and kept by the tag's identity (its shards' paths, sizes, mtimes, inodes and pickle
// hashes), so that both pages, and every mount in the process, share one pass.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/files/report_verdict.h"
#include "zeromount/view/files/stats.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

// A histogram for people: bins whose edges are GridHistogram boundaries, so that each count is
// exact for the edges shown. edges.size() == counts.size() + 1 (both empty without values).
struct Bins {
  std::vector<double> edges;
  std::vector<uint64_t> counts;
};
inline constexpr size_t kReportBins = 20;
// Up to `bins` bins of about equal width between the least and the greatest value counted.
Bins linear_bins(const GridHistogram& h, size_t bins = kReportBins);
// Bins that end at powers of two (octaves, grouped when there are more than `bins`): the scale on
// which second moments spread.
Bins octave_bins(const GridHistogram& h, size_t bins = kReportBins);

// Whether the tag saved exp_avg and exp_avg_sq (Adam's moments): then update sizes exist. A Muon
// run keeps them for its Adam group only (has_update(ix, p)).
bool has_update(const ds::TagIndex& ix);
bool has_update(const ds::TagIndex& ix, const ds::Param& p);
// The bytes one figures pass reads: every master weight, and Adam's moments where kept.
uint64_t figure_bytes(const ds::TagIndex& ix);

// One parameter of one tag.
struct ParamFigures {
  Stats weights;               // the fp32 master weights (as stored: 16-bit masters widened)
  Stats moment;                // exp_avg_sq
  Stats update;                // |exp_avg| / (sqrt(exp_avg_sq) + eps), element by element, in double
  uint32_t median_bucket = 0;  // the GridHistogram bucket of the median update (update.n > 0)
  Bins weight_bins, moment_bins;
  // Packed experts (number_rules.h): sums of squares per expert of the weights and of exp_avg_sq;
  // not packed() otherwise.
  ExpertSums expert_weights, expert_moment;
};

// A layer: the parameters that share the name up to the first numeric component
// ("model.layers.3"), or else the module ("fc1" of fc1.weight). Merged over its parameters.
struct LayerFigures {
  std::string name;
  std::vector<size_t> params;  // positions in TagIndex::params, in module order
  Stats weights, moment, update;
};

struct TagFigures {
  std::vector<ParamFigures> params;  // by position in TagIndex::params
  std::vector<LayerFigures> layers;  // in module order
  double step = NAN;                 // group 0's step, if the optimizer keeps one
  uint64_t bytes_read = 0;
  double seconds = 0;  // the pass's wall time
  Verdict verdict;     // verify's checks that these figures answer (report_verdict.h)
};

// The layers of a tag in module order (MountedTag::module_order: one model-state pickle, read
// once), without figures: what a page is laid out with before any tensor is read. The page built
// with figures lists them in the same order, so that both have one size.
std::vector<LayerFigures> report_layers(const MountedTag& t);

// The figures of `t`, computed by one pass over its fp32, exp_avg and exp_avg_sq (in parallel
// over parameters), or taken from the cache of the last few tags computed.
std::shared_ptr<const TagFigures> tag_figures(const MountedTag& t, const pt::ExtentReader& src);
// The same without `params` (what a page across tags shows), kept for many more tags.
std::shared_ptr<const TagFigures> tag_layer_figures(const MountedTag& t, const pt::ExtentReader& src);

// ||w_t - w_{t-1}|| and ||w_{t-1}|| per layer of `next`, from the fp32 weights of both tags read
// together; a layer whose parameters differ in the two (a name or a shape) has none.
struct ChangeFigures {
  std::vector<double> diff_sumsq, prev_sumsq;  // by layer of `next`; NaN or inf: values that are not finite
  // By layer: whether both tags hold the layer's parameters alike (the same names and shapes).
  std::vector<bool> comparable;
  uint64_t bytes_read = 0;
  double seconds = 0;
};
std::shared_ptr<const ChangeFigures> change_figures(const MountedTag& prev, const MountedTag& next,
                                                    const pt::ExtentReader& src);

// What a page across tags shows (its tags are NamedTags: paths inside the page's folder).
struct RunFigures {
  std::vector<std::shared_ptr<const TagFigures>> tags;       // as the NamedTags, without params
  std::vector<std::shared_ptr<const ChangeFigures>> change;  // [k]: tags[k - 1] to tags[k]; [0] null
};
// Computes what run_report shows: each tag's figures and each consecutive pair's change.
RunFigures run_figures(const std::vector<NamedTag>& tags, const pt::ExtentReader& src);

}  // namespace zm::view
