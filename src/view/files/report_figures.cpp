// The numbers of the report pages: one streaming pass per tag, one per pair of consecutive tags,
// each kept by the tags' identity (include/zeromount/view/files/report_figures.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/inspect.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/view/files/number_rules.h"
#include "zeromount/view/files/report_figures.h"
#include "zeromount/view/memo.h"
#include "zeromount/view/worker_pool.h"

namespace zm::view {

namespace {

using Clock = std::chrono::steady_clock;

// What makes two indexes the same data: every shard's path and identity (hashed: a tag of 1,000
// shards is one short key).
std::string identity(const ds::TagIndex& ix) {
  std::string all;
  for (const auto& s : ix.shards)
    all += s.path + " " + std::to_string(s.size) + " " + std::to_string(s.mtime_ns) + " " + std::to_string(s.inode) +
           " " + std::to_string(s.pickle_hash) + "\n";
  return ix.dir + " " + std::to_string(pt::hash_bytes(all.data(), all.size()));
}

// The layer a parameter belongs to: its name up to the first numeric component, else its module.
std::string layer_of(const std::string& name) {
  size_t at = 0;
  while (at < name.size()) {
    const size_t end = std::min(name.find('.', at), name.size());
    if (end > at && std::all_of(name.begin() + long(at), name.begin() + long(end), ::isdigit))
      return name.substr(0, end);
    at = end + 1;
  }
  const size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

double eps_of(const ds::TagIndex& ix, int group) {
  const pt::Node* groups = ix.param_groups;
  const pt::Node* g = groups && size_t(group) < groups->items.size() ? groups->items[size_t(group)] : nullptr;
  const pt::Node* eps = g ? g->get("eps") : nullptr;
  if (eps && eps->is(pt::Kind::Float)) return eps->f;
  if (eps && eps->is(pt::Kind::Int)) return double(eps->i);
  return 1e-8;  // torch's Adam and AdamW default
}

// Index of state `name` in state_names; state_names.size() when the tag has none.
size_t state_of(const ds::TagIndex& ix, const char* name) {
  return size_t(std::find(ix.state_names.begin(), ix.state_names.end(), name) - ix.state_names.begin());
}

// A worker's histograms, reused from parameter to parameter (512 KiB each).
struct Scratch {
  GridHistogram weights, moment, update;
  std::vector<std::vector<float>> block;
  std::vector<float> update_values;
};

ParamFigures param_figures(const MountedTag& t, const ds::Param& p, const pt::ExtentReader& src, Scratch& s,
                           uint64_t& bytes) {
  const ds::TagIndex& ix = *t.index;
  const size_t avg = state_of(ix, "exp_avg"), sq = state_of(ix, "exp_avg_sq");
  const bool adam = has_update(ix, p);
  const double eps = eps_of(ix, p.group);
  ParamFigures f;
  const uint64_t experts = packed_experts(p.name, p.shape);
  f.expert_weights = ExpertSums(experts, p.numel);
  if (adam) f.expert_moment = ExpertSums(experts, p.numel);
  StateReader reader(t, p, adam ? std::vector<size_t>{0, avg, sq} : std::vector<size_t>{0});
  while (const size_t n = reader.next(src, s.block)) {
    f.expert_weights.add(f.weights, s.block[0].data(), n);
    s.weights.add(s.block[0].data(), n);
    if (!adam) continue;
    const float* m = s.block[1].data();
    const float* v = s.block[2].data();
    f.expert_moment.add(f.moment, v, n);
    s.moment.add(v, n);
    s.update_values.resize(n);
    add_update_sizes(f.update, m, v, eps, n, s.update_values.data());
    s.update.add(s.update_values.data(), n);
  }
  bytes += reader.bytes_read();
  f.weight_bins = linear_bins(s.weights);
  f.moment_bins = octave_bins(s.moment);
  if (s.update.total()) f.median_bucket = s.update.bucket_of_rank((s.update.total() - 1) / 2);
  s.weights.clear();
  s.moment.clear();
  s.update.clear();
  return f;
}

// A pass is bound by reading and arithmetic alike: a few threads.
size_t figure_workers() {
  return std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
}

std::shared_ptr<const TagFigures> compute_tag(const MountedTag& t, const pt::ExtentReader& src) {
  const auto t0 = Clock::now();
  const ds::TagIndex& ix = *t.index;
  auto out = std::make_shared<TagFigures>();
  out->params.resize(ix.params.size());
  std::mutex mu;
  std::vector<std::unique_ptr<Scratch>> free;
  std::atomic<uint64_t> bytes{0};
  parallel_for(ix.params.size(), figure_workers(), [&](size_t k) {
    std::unique_ptr<Scratch> s;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!free.empty()) {
        s = std::move(free.back());
        free.pop_back();
      }
    }
    if (!s) s = std::make_unique<Scratch>();
    uint64_t read = 0;
    out->params[k] = param_figures(t, ix.params[k], src, *s, read);
    bytes += read;
    std::lock_guard<std::mutex> lock(mu);
    free.push_back(std::move(s));
  });
  out->layers = report_layers(t);
  for (LayerFigures& l : out->layers)
    for (size_t k : l.params) {
      l.weights.merge(out->params[k].weights);
      l.moment.merge(out->params[k].moment);
      l.update.merge(out->params[k].update);
    }
  if (const ds::StepValue* step = ix.run_step()) out->step = ds::step_number(ix, *step);
  out->verdict = tag_verdict(ix, *out);
  out->bytes_read = bytes;
  out->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

// The bins between consecutive grid boundaries `at` (its last entry ends the last bin).
Bins bins_at(const GridHistogram& h, const std::vector<uint32_t>& at) {
  Bins out;
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    out.edges.push_back(GridHistogram::lower(at[i]));
    out.counts.push_back(h.count(at[i], at[i + 1]));
  }
  out.edges.push_back(GridHistogram::lower(at.back()));
  return out;
}

}  // namespace

bool has_update(const ds::TagIndex& ix) {
  return state_of(ix, "exp_avg") < ix.state_names.size() && state_of(ix, "exp_avg_sq") < ix.state_names.size();
}

bool has_update(const ds::TagIndex& ix, const ds::Param& p) {
  return has_update(ix) && ix.has(p, state_of(ix, "exp_avg")) && ix.has(p, state_of(ix, "exp_avg_sq"));
}

uint64_t figure_bytes(const ds::TagIndex& ix) {
  uint64_t n = 0;
  for (const auto& p : ix.params) n += p.numel * (has_update(ix, p) ? 3 : 1);
  return n * pt::element_size(ix.master_dtype);
}

Bins linear_bins(const GridHistogram& h, size_t bins) {
  if (!h.total()) return {};
  const uint32_t first = h.first(), end = h.last() + 1;
  const double lo = GridHistogram::lower(first), hi = GridHistogram::lower(end);
  std::vector<uint32_t> at{first};
  for (size_t i = 1; i < bins; ++i) {
    uint32_t b;
    if (std::isfinite(hi - lo)) {  // the boundary nearest the equal split, so that counts stay exact
      const double want = lo + (hi - lo) * double(i) / double(bins);
      b = GridHistogram::bucket(float(want));
      if (b + 1 <= end && std::fabs(GridHistogram::lower(b + 1) - want) < std::fabs(GridHistogram::lower(b) - want))
        ++b;
    } else {  // values near the float range's ends: split the buckets instead
      b = first + uint32_t(uint64_t(end - first) * i / bins);
    }
    if (b > at.back() && b < end) at.push_back(b);
  }
  at.push_back(end);
  return bins_at(h, at);
}

Bins octave_bins(const GridHistogram& h, size_t bins) {
  if (!h.total()) return {};
  const uint32_t first = h.first(), end = h.last() + 1;
  std::vector<uint32_t> powers;  // the buckets that start at a power of two, inside (first, end)
  for (int e = -133; e <= 127; ++e) {
    const uint32_t b = GridHistogram::bucket(std::ldexp(1.0f, e));
    if (b > first && b < end) powers.push_back(b);
  }
  const size_t group = powers.size() / bins + 1;  // at most `bins` bins in all
  std::vector<uint32_t> at{first};
  for (size_t i = group - 1; i < powers.size(); i += group) at.push_back(powers[i]);
  at.push_back(end);
  return bins_at(h, at);
}

std::vector<LayerFigures> report_layers(const MountedTag& t) {
  const ds::TagIndex& ix = *t.index;
  std::vector<LayerFigures> layers;
  std::map<std::string, size_t> at;
  for (size_t k : t.module_order()) {
    const std::string name = layer_of(ix.params[k].name);
    auto [it, fresh] = at.emplace(name, layers.size());
    if (fresh) layers.push_back(LayerFigures{name, {}, {}, {}, {}});
    layers[it->second].params.push_back(k);
  }
  return layers;
}

std::shared_ptr<const TagFigures> tag_figures(const MountedTag& t, const pt::ExtentReader& src) {
  static Memo<std::string, TagFigures, 4> memo;  // O(params) each: the last few tags only
  return memo.get(identity(*t.index), [&] { return compute_tag(t, src); });
}

std::shared_ptr<const TagFigures> tag_layer_figures(const MountedTag& t, const pt::ExtentReader& src) {
  static Memo<std::string, TagFigures, 4096> memo;  // O(layers) each: a page across many tags computes each once
  return memo.get(identity(*t.index), [&] {
    auto lite = std::make_shared<TagFigures>(*tag_figures(t, src));
    lite->params.clear();
    lite->params.shrink_to_fit();
    return std::shared_ptr<const TagFigures>(std::move(lite));
  });
}

std::shared_ptr<const ChangeFigures> change_figures(const MountedTag& prev, const MountedTag& next,
                                                    const pt::ExtentReader& src) {
  static Memo<std::string, ChangeFigures, 4096> memo;  // O(layers) each
  return memo.get(identity(*prev.index) + "\n->\n" + identity(*next.index), [&] {
    const auto t0 = Clock::now();
    auto out = std::make_shared<ChangeFigures>();
    const auto layers = report_layers(next);
    out->diff_sumsq.assign(layers.size(), 0);
    out->prev_sumsq.assign(layers.size(), 0);
    std::map<std::string, size_t> before_in;  // parameters per layer in `prev`
    for (const ds::Param& q : prev.index->params) ++before_in[layer_of(q.name)];
    out->comparable.assign(layers.size(), true);
    std::unordered_map<std::string_view, const ds::Param*> in_prev;  // one lookup per parameter, not a scan
    for (const ds::Param& q : prev.index->params) in_prev.emplace(q.name, &q);
    const auto prev_param = [&](const std::string& name) -> const ds::Param* {
      auto it = in_prev.find(name);
      return it == in_prev.end() ? nullptr : it->second;
    };
    for (size_t l = 0; l < layers.size(); ++l) {
      auto it = before_in.find(layers[l].name);
      bool alike = it != before_in.end() && it->second == layers[l].params.size();
      for (size_t k : layers[l].params) {
        const ds::Param* q = prev_param(next.index->params[k].name);
        alike = alike && q && q->shape == next.index->params[k].shape;
      }
      out->comparable[l] = alike;
    }
    std::vector<std::vector<float>> a, b;
    for (size_t l = 0; l < layers.size(); ++l)
      for (size_t k : layers[l].params) {
        if (!out->comparable[l]) break;
        const ds::Param& p = next.index->params[k];
        const ds::Param* q = prev_param(p.name);
        StateReader now(next, p, {0}), before(prev, *q, {0});
        while (const size_t n = now.next(src, a)) {
          if (before.next(src, b) != n) throw Error(p.name + ": the two tags' weights differ in length", EIO);
          double d2 = 0, p2 = 0;
          for (size_t e = 0; e < n; ++e) {
            const double x = a[0][e], y = b[0][e];
            d2 += (x - y) * (x - y);
            p2 += y * y;
          }
          out->diff_sumsq[l] += d2;  // a NaN or inf stays: the change is then not a number
          out->prev_sumsq[l] += p2;
        }
        out->bytes_read += now.bytes_read() + before.bytes_read();
      }
    out->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return std::shared_ptr<const ChangeFigures>(std::move(out));
  });
}

RunFigures run_figures(const std::vector<NamedTag>& tags, const pt::ExtentReader& src) {
  RunFigures r;
  for (size_t k = 0; k < tags.size(); ++k) {
    r.tags.push_back(tag_layer_figures(*tags[k].tag, src));
    r.change.push_back(k ? change_figures(*tags[k - 1].tag, *tags[k].tag, src) : nullptr);
  }
  return r;
}

}  // namespace zm::view
