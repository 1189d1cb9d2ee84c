#include "zeromount/check/numbers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/files/number_rules.h"

namespace zm::check {

const char* const kNormRule =
    "norm-outlier: parameters whose names differ only in their numbers (layers.3.mlp.experts.5.w1 and "
    "layers.3.mlp.experts.6.w1) and that have one shape are siblings; with 4 or more siblings, one whose RMS "
    "(norm / sqrt(numel)) is more than 4 times the siblings' median, or less than a quarter of it, is a warning. "
    "It misses an expert left at its initialisation while training has moved the others' RMS by less than 4x (early in "
    "a run, or with a small learning rate), and it warns on siblings that are meant to differ (a first or last "
    "layer, a gate initialised to zero). The experts packed in one parameter are siblings too: a name with an "
    "'experts' component not followed by a number and 3 or more dims (transformers 5's "
    "layers.0.mlp.experts.gate_up_proj [E, 2I, H]) holds E experts on dim 0, each a contiguous slice, and one "
    "expert's RMS is weighed against the E experts' median by the same rule (up to 4096 experts).";

namespace {

bool float_dtype(pt::DType d) {
  return d == pt::DType::F32 || d == pt::DType::F16 || d == pt::DType::BF16;
}

std::string number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// The parameter's step: its own step item, else the largest step any pickle holds.
std::map<std::string, double> param_steps(const Input& in, const std::vector<ItemFigures>& fig, double& any) {
  std::map<std::string, double> out;
  any = NAN;
  for (const auto& [where, v] : in.steps)
    if (!(v <= any)) any = v;
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& it = in.items[k];
    if (it.state != kStep) continue;
    const double v = it.value ? *it.value : fig[k].read && fig[k].stats.n ? fig[k].stats.max : NAN;
    if (!std::isnan(v)) out[it.param] = v;
  }
  return out;
}

void check_finite(const Input& in, const std::vector<ItemFigures>& fig, Findings& f) {
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& it = in.items[k];
    const ItemFigures& x = fig[k];
    if (!x.read) continue;
    f.ran("finite");
    if (!x.stats.nan && !x.stats.inf) continue;
    std::string m;
    if (x.stats.nan)
      m += std::to_string(x.stats.nan) + " NaN (first at " + index_text(it.shape, uint64_t(x.first_nan)) + ")";
    if (x.stats.inf)
      m += std::string(m.empty() ? "" : ", ") + std::to_string(x.stats.inf) + " inf (first at " +
           index_text(it.shape, uint64_t(x.first_inf)) + ")";
    f.fail("finite", it.param + " " + it.state,
           m + " of " + std::to_string(it.numel()) + " elements [" + it.stored + "]");
  }
}

void check_moments(const Input& in, const std::vector<ItemFigures>& fig, Findings& f) {
  double any_step = NAN;
  const auto steps = param_steps(in, fig, any_step);
  size_t moments = 0, zero = 0;
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& it = in.items[k];
    const ItemFigures& x = fig[k];
    if (!x.read) continue;
    if (it.state == "exp_avg_sq" || it.state == "max_exp_avg_sq") {
      f.ran("exp_avg_sq-nonnegative");
      if (x.stats.n && x.stats.min < 0)
        f.fail("exp_avg_sq-nonnegative", it.param + " " + it.state,
               "least value " + number(x.stats.min) + ": a second moment is a mean of squares [" + it.stored + "]");
    }
    if (it.state != "exp_avg" && it.state != "exp_avg_sq") continue;
    const auto s = steps.find(it.param);
    const double step = s != steps.end() ? s->second : any_step;
    f.ran("moments-not-reset");
    ++moments;
    if (!(step > 0) || it.numel() == 0 || x.stats.n != it.numel() || x.stats.min != 0 || x.stats.max != 0) continue;
    ++zero;
    f.warn("moments-not-reset", it.param + " " + it.state,
           "all zero while step is " + number(step) +
               ": optimizer state looks reset (or the parameter never had a "
               "gradient) [" +
               it.stored + "]");
  }
  // An expert of a packed parameter whose exp_avg_sq slice is all zero after a step: no token
  // reached it. Not counted with the parameters above: the rest of its parameter has moments.
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& it = in.items[k];
    if (!fig[k].read || it.state != "exp_avg_sq") continue;
    const auto s = steps.find(it.param);
    const double step = s != steps.end() ? s->second : any_step;
    if (!(step > 0)) continue;
    for (size_t e : view::experts_without_gradient(fig[k].experts.sumsq()))
      f.warn("moments-not-reset", view::expert_subject(it.param, e) + " " + it.state,
             "its slice of dim 0 (" + std::to_string(fig[k].experts.per_expert()) +
                 " elements) is all zero while step is " + number(step) + ": no gradient ever reached this expert [" +
                 it.stored + "]");
  }
  if (moments && zero == moments)
    f.fail("moments-not-reset", "all parameters",
           "every exp_avg and exp_avg_sq is zero while step > 0: optimizer state looks reset");
}

// Every 'step' of every group and rank must be one value ('global_steps' likewise, apart: an
// fp16 run's skipped steps make the engine's count differ from the optimizer's).
void check_steps(const Input& in, const std::vector<ItemFigures>& fig, Findings& f) {
  std::map<std::string, std::map<double, std::string>> seen;  // kind -> value -> first place
  uint64_t n = 0;
  for (const auto& [where, v] : in.steps) {
    const std::string kind = where.ends_with("global_steps") ? "global_steps" : "step";
    seen[kind].emplace(v, where);
    ++n;
  }
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& it = in.items[k];
    if (it.state != kStep) continue;
    const double v = it.value ? *it.value : fig[k].read && fig[k].stats.n == 1 ? fig[k].stats.max : NAN;
    if (std::isnan(v)) continue;
    seen["step"].emplace(v, it.stored);
    ++n;
  }
  if (!n) return;
  f.ran("step-agrees", n);
  for (const auto& [kind, values] : seen) {
    if (values.size() < 2) continue;
    std::string m;
    for (const auto& [v, where] : values) m += (m.empty() ? "" : "; ") + number(v) + " at " + where;
    f.fail("step-agrees", kind, std::to_string(values.size()) + " different values across groups and ranks: " + m);
  }
}

// A 16-bit module weight must be its fp32 master rounded to nearest even (an fp32 one, the master
// itself): otherwise the model-state file was saved from a module that was not updated (a stale
// module) and a weights-only load gets other values than a resume. The pass compared them.
void check_module(const Input& in, const std::vector<ItemFigures>& fig, Findings& f) {
  std::map<std::string, size_t> master;
  for (size_t k = 0; k < in.items.size(); ++k)
    if (in.items[k].state == kWeight && in.items[k].trainable) master.emplace(in.items[k].param, k);
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& m = in.items[k];
    if (m.state != kModule) continue;
    const auto w = master.find(m.param);
    if (w == master.end() || !float_dtype(m.dtype)) continue;
    const Item& ms = in.items[w->second];
    f.ran("module-matches-masters");
    if (ms.numel() != m.numel()) {
      f.fail("module-matches-masters", m.param,
             "module holds " + std::to_string(m.numel()) + " elements, master " + std::to_string(ms.numel()));
      continue;
    }
    const ItemFigures& x = fig[k];
    if (x.master >= 0 && x.not_rounded)
      f.fail("module-matches-masters", m.param,
             std::to_string(x.not_rounded) + " of " + std::to_string(m.numel()) +
                 " module weights are not the fp32 master rounded (first at " +
                 index_text(m.shape, x.first_not_rounded) + "): a stale module [" + m.stored + "]");
  }
}

// A norm-outlier finding: `subject`'s RMS against the median of its `others` siblings (`what`).
void norm_outlier(Findings& f, const std::string& subject, double rms, size_t others, double median,
                  const std::string& what) {
  f.warn("norm-outlier", subject,
         "RMS " + number(rms) + ", its " + std::to_string(others) + " siblings' median " + number(median) + " (" +
             what + "): left at its initialisation, reset or diverged?");
}

void check_norms(const Input& in, const std::vector<ItemFigures>& fig, Findings& f) {
  // The experts of one packed parameter are siblings too (view::expert_outliers).
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& it = in.items[k];
    if (it.state != kWeight || !it.trainable || !fig[k].read) continue;
    const view::ExpertOutliers o = view::expert_outliers(fig[k].experts.sumsq(), fig[k].experts.per_expert());
    if (o.rms.empty()) continue;
    f.ran("norm-outlier", o.rms.size());
    for (size_t e = 0; e < o.rms.size(); ++e)
      if (o.outlier[e])
        norm_outlier(f, view::expert_subject(it.param, e), o.rms[e], o.rms.size() - 1, o.median,
                     "experts packed on dim 0 of " + it.param);
  }
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& it = in.items[k];
    if (it.state != kWeight || !it.trainable || !fig[k].read || !fig[k].stats.n || it.numel() < 2) continue;
    std::string key = view::sibling_key(it.param) + "|";
    for (int64_t d : it.shape) key += std::to_string(d) + ",";
    groups[key].push_back(k);
  }
  for (const auto& [key, members] : groups) {
    if (members.size() < view::kMinSiblings) continue;
    std::vector<double> rms;
    for (size_t k : members) rms.push_back(fig[k].stats.l2() / std::sqrt(double(in.items[k].numel())));
    std::vector<bool> outlier;
    const double median = view::norm_outliers(rms, outlier);
    f.ran("norm-outlier", members.size());
    for (size_t j = 0; j < members.size(); ++j) {
      if (!outlier[j]) continue;
      norm_outlier(f, in.items[members[j]].param, rms[j], members.size() - 1, median, key.substr(0, key.find('|')));
    }
  }
}

}  // namespace

std::string index_text(const std::vector<int64_t>& shape, uint64_t flat) {
  std::vector<uint64_t> idx(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    const uint64_t d = shape[i] > 0 ? uint64_t(shape[i]) : 1;
    idx[i] = flat % d;
    flat /= d;
  }
  std::string o = "[";
  for (size_t i = 0; i < idx.size(); ++i) o += (i ? ", " : "") + std::to_string(idx[i]);
  return o + "]";
}

ValueBlocks::ValueBlocks(const Item& item, const pt::ExtentReader& src)
    : item_(item), src_(src), wide_(!float_dtype(item.dtype)), numel_(item.numel()) {}

size_t ValueBlocks::next(std::vector<float>& fl, std::vector<double>& db) {
  const size_t n = size_t(std::min<uint64_t>(numel_ - at_, kBlock));
  if (!n) return 0;
  const size_t es = pt::element_size(item_.dtype);
  const auto read = [&](void* to) {
    if (item_.bytes.read(at_ * es, to, n * es, src_) != n * es)
      throw Error(item_.stored + ": its bytes end before its " + std::to_string(numel_) + " elements", EIO);
    read_ += n * es;
  };
  floats_ = nullptr;
  last_ = n;
  if (item_.dtype == pt::DType::F32) {  // no copy: the bytes are the floats
    fl.resize(n);
    read(fl.data());
    floats_ = &fl;
  } else {
    raw_.resize(n * es);
    read(raw_.data());
    if (wide_) {
      db.resize(n);
      for (size_t i = 0; i < n; ++i) db[i] = pt::element_value(raw_.data() + i * es, item_.dtype);
    } else {
      fl.resize(n);
      pt::convert(item_.dtype, raw_.data(), pt::DType::F32, fl.data(), n);
    }
  }
  at_ += n;
  return n;
}

std::string_view ValueBlocks::raw() const {
  if (floats_) return {reinterpret_cast<const char*>(floats_->data()), last_ * sizeof(float)};
  return {raw_.data(), raw_.size()};
}

namespace {

// Adds a block just read (n elements at position() - n) to an item's figures.
void add_block(ItemFigures& x, const ValueBlocks& b, size_t n, const std::vector<float>& fl,
               const std::vector<double>& db) {
  const uint64_t nan = x.stats.nan, inf = x.stats.inf, at = b.position() - n;
  if (b.wide())
    x.experts.add(x.stats, db.data(), n);
  else
    x.experts.add(x.stats, fl.data(), n);
  // The first index is looked for only in the block where the first one was counted.
  for (size_t i = 0; i < n && ((x.stats.nan > nan && x.first_nan < 0) || (x.stats.inf > inf && x.first_inf < 0)); ++i) {
    const double v = b.wide() ? db[i] : double(fl[i]);
    if (std::isnan(v) && x.first_nan < 0) x.first_nan = int64_t(at + i);
    if (std::isinf(v) && x.first_inf < 0) x.first_inf = int64_t(at + i);
  }
}

// For each trainable fp32 master, the index of its 16-bit module weight when the two can be
// compared element by element (module-matches-masters); -1 otherwise.
std::vector<int64_t> module_of(const Input& in) {
  std::map<std::string, size_t> master;
  for (size_t k = 0; k < in.items.size(); ++k)
    if (in.items[k].state == kWeight && in.items[k].trainable && in.items[k].unread.empty() && !in.items[k].value)
      master.emplace(in.items[k].param, k);
  std::vector<int64_t> out(in.items.size(), -1);
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& m = in.items[k];
    if (m.state != kModule || !float_dtype(m.dtype) || !m.unread.empty() || m.value) continue;
    const auto w = master.find(m.param);
    if (w != master.end() && in.items[w->second].numel() == m.numel() && float_dtype(in.items[w->second].dtype))
      out[w->second] = int64_t(k);
  }
  return out;
}

}  // namespace

std::vector<ItemFigures> item_figures(Input& in, Findings& f) {
  std::vector<ItemFigures> out(in.items.size());
  const std::vector<int64_t> module = module_of(in);
  std::vector<bool> done(in.items.size());
  std::vector<float> fl, mf;
  std::vector<double> db, md;
  std::vector<char> rounded;
  for (size_t k = 0; k < in.items.size(); ++k) {
    const Item& it = in.items[k];
    ItemFigures& x = out[k];
    if (done[k] || !it.unread.empty()) continue;
    if (it.value) {
      const double v = *it.value;
      x.stats.add(&v, 1);
      x.read = true;
      continue;
    }
    const int64_t mk = module[k];
    // Per-expert sums where a check reads them (norm-outlier, moments-not-reset): cutting every
    // other item's blocks at expert boundaries would only slow the pass.
    if (it.state == kWeight || it.state == "exp_avg_sq")
      x.experts = view::ExpertSums(view::packed_experts(it.param, it.shape), it.numel());
    try {
      ValueBlocks b(it, in.files);
      if (mk < 0) {
        for (size_t n; (n = b.next(fl, db)) > 0;) add_block(x, b, n, fl, db);
        f.bytes_read += b.bytes_read();
        x.read = true;
        continue;
      }
      // The master and its module weight in the same blocks: each read once, the module compared
      // with the master rounded as the optimizer rounds it while both are in the cache.
      const Item& m = in.items[size_t(mk)];
      ItemFigures& y = out[size_t(mk)];
      done[size_t(mk)] = true;
      ValueBlocks bm(m, in.files);
      const size_t es = pt::element_size(m.dtype);
      for (size_t n; (n = b.next(fl, db)) > 0;) {
        if (bm.next(mf, md) != n) throw Error(m.stored + ": short read", EIO);
        add_block(x, b, n, fl, db);
        add_block(y, bm, n, mf, md);
        rounded.resize(n * es);
        pt::convert(pt::DType::F32, fl.data(), m.dtype, rounded.data(), n);
        if (std::memcmp(rounded.data(), bm.raw().data(), rounded.size()) == 0) continue;
        const uint64_t at = b.position() - n;
        for (size_t i = 0; i < n; ++i)
          if (std::memcmp(rounded.data() + i * es, bm.raw().data() + i * es, es) != 0 &&
              !(std::isnan(fl[i]) && std::isnan(mf[i]))) {
            if (!y.not_rounded) y.first_not_rounded = at + i;
            ++y.not_rounded;
          }
      }
      f.bytes_read += b.bytes_read() + bm.bytes_read();
      x.read = y.read = true;
      y.master = int64_t(k);
    } catch (const Error& e) {
      f.fail("files-open", it.param + " " + it.state, e.what());
      if (mk >= 0) {  // read on its own when its turn comes
        done[size_t(mk)] = false;
        out[size_t(mk)] = {};
      }
    }
  }
  f.bytes_read += in.files.settle_crcs(f);
  return out;
}

void check_numbers(const Input& in, const std::vector<ItemFigures>& figures, Findings& f) {
  check_finite(in, figures, f);
  check_moments(in, figures, f);
  check_steps(in, figures, f);
  check_module(in, figures, f);
  check_norms(in, figures, f);
}

}  // namespace zm::check
