// The (pp, tp, dp) grid of a model-parallel tag [tp §1, §2, §4.2, §6, §7]: each (p, t) cell is
// indexed as a data-parallel checkpoint of its own, then every parameter gets one slice per tp
// rank, chosen among the pipeline stages that hold it as ds_to_universal.py's one-worker extraction
// leaves them.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>

#include "builders.h"
#include "model_states.h"
#include "parallel.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/ds/tp_merge.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"

namespace zm::ds {

namespace {

const char* kNoUcInfo =
    "Required universal_checkpoint_info state is missing in checkpoint. Verify that client creates this state.";

struct GridFiles {
  std::map<int, std::string> mp;                     // mp_rank_XX_model_states.pt by m
  std::map<std::pair<int, int>, std::string> optim;  // (d, m)
  std::map<std::pair<int, int>, std::string> zero_model;
  std::string prefix;
  int layer_files = 0, layer01_files = 0, expert_files = 0;
};

GridFiles collect(const std::string& dir) {
  GridFiles g;
  for (const auto& [f, path] : tag_folder_files(dir)) {
    auto n = parse_shard_name(f);
    if (!n) continue;
    if (n->kind == FileKind::ExpertStates) {
      ++g.expert_files;
      continue;
    }
    if (n->kind == FileKind::LayerStates) {  // never read [tp §2]
      ++g.layer_files;
      g.layer01_files += n->layer == 1;
      continue;
    }
    if (n->kind == FileKind::ModelStates) g.mp[n->mp] = path;
    if (n->kind == FileKind::ZeroModelStates) g.zero_model[{n->dp, n->mp}] = path;
    if (n->kind == FileKind::OptimStates) {
      if (!g.optim.empty() && n->prefix != g.prefix)
        throw FormatError(where(path, "optimizer files with different prefixes"));
      g.prefix = n->prefix;
      g.optim[{n->dp, n->mp}] = path;
    }
  }
  return g;
}

// A parameter's copy in one (p, t) cell.
struct Holder {
  int p = 0;
  Shape shape;
  std::vector<std::vector<Fragment>> stored;  // dp ranks in Fragment::rank
  int group = 0, step = -1;
};

class Grid {
 public:
  Grid(TagIndex& index, bool strict, std::optional<AutoEp> autoep = std::nullopt)
      : ix_(index), strict_(strict), autoep_(std::move(autoep)) {}

  void run() {
    GridFiles g = collect(ix_.dir);
    if (g.optim.empty()) throw Error(where(ix_.dir, "no *_optim_states.pt files: not a ZeRO checkpoint"), ENOENT);
    ix_.optim_prefix = g.prefix;
    if (!g.zero_model.empty() && g.mp.empty()) return run_zero3(g);
    degrees(g);
    const int T = ix_.tp, P = ix_.pp, D = ix_.dp;
    if (autoep_) check_autoep();
    holders_.clear();
    for (int p = 0; p < P; ++p)
      for (int t = 0; t < T; ++t) {
        const int m = p * T + t;
        TagFiles files;
        for (int d = 0; d < D; ++d) files.optim.push_back(need(g.optim, {d, m}, optim_states_name(g.prefix, d, m)));
        files.model.push_back(g.mp.at(m));
        if (autoep_)
          for (const auto& [name, x] : autoep_->experts) files.expert_dp[name] = D / int(x.ep_size);
        add_cell(p, t, files, false);
      }
    for (const auto& [m, path] : g.mp) ix_.mp_files.push_back(path);
    ix_.model_files = {g.mp.begin()->second};
    finish(g.mp.begin()->second);
  }

 private:
  std::string need(const std::map<std::pair<int, int>, std::string>& files, std::pair<int, int> key,
                   const std::string& name) {
    auto it = files.find(key);
    if (it == files.end())
      throw FormatError(where(ix_.dir + "/" + name, "missing: the (pp " + std::to_string(ix_.pp) + " x tp " +
                                                        std::to_string(ix_.tp) + " x dp " + std::to_string(ix_.dp) +
                                                        ") grid needs one file per cell"));
    return it->second;
  }

  // [tp §2]: checkpoint_parallel_dimensions, else the layer files, else the model-state file count.
  void degrees(const GridFiles& g) {
    if (g.mp.empty()) throw FormatError(where(ix_.dir + "/" + model_states_name(0), "missing: ZeRO-1/2 needs it"));
    if (g.mp.rbegin()->first + 1 != int(g.mp.size()))
      throw FormatError(where(
          ix_.dir, "model-state files mp_rank_00.." + std::to_string(g.mp.rbegin()->first) + " are not all present"));
    TagIndex scratch;
    ShardSet shards(scratch);
    int have = 0, P = 0, T = 0;
    for (const auto& [m, path] : g.mp) {
      OpenShard f = shards.open(path);
      auto cpd = f.root().find("checkpoint_parallel_dimensions");
      if (!cpd || cpd->is_none()) continue;
      const int pp = int((*cpd)["pp_degree"].as_int()), tp = int((*cpd)["tp_degree"].as_int());
      if (pp < 1 || tp < 1 || (have && (pp != P || tp != T)))
        throw FormatError(where(path,
                                "Checkpoint checkpoint_parallel_dimensions are not positive or differ between "
                                "model-state files"));
      ++have, P = pp, T = tp;
    }
    const int M = int(g.mp.size());
    if (have && have != M)
      throw FormatError(
          where(ix_.dir, "Checkpoint checkpoint_parallel_dimensions is missing from some model-state files"));
    if (!have) {
      T = g.layer_files ? g.layer01_files : M;
      if (T < 1) T = 1;
      P = M / T;
    }
    if (P * T != M)
      throw FormatError(where(ix_.dir, "Checkpoint model-state file count " + std::to_string(M) +
                                           " does not match pp_degree " + std::to_string(P) + " x tp_degree " +
                                           std::to_string(T)));
    if (g.layer_files && !g.layer01_files)
      throw FormatError(ix_.dir + " seems a bogus DeepSpeed checkpoint folder: Cannot find layer_01* files in there.");
    if (P > 1 && !g.layer_files)
      throw FormatError(where(ix_.dir, "pipeline degree " + std::to_string(P) + " but no layer_* files"));
    if (g.optim.size() % size_t(P * T) != 0)
      throw FormatError(where(ix_.dir, "Checkpoint ZeRO file count " + std::to_string(g.optim.size()) +
                                           " is not divisible by pp_degree x tp_degree " + std::to_string(P * T)));
    ix_.pp = P, ix_.tp = T, ix_.dp = int(g.optim.size()) / (P * T), ix_.mp = P * T;
  }

  // [tp §8]: the converter consolidates AutoEP experts only without tensor parallelism, and its expert
  // fragments have no pipeline stage in their path.
  void check_autoep() {
    if (ix_.tp != 1)
      throw Error(where(ix_.dir,
                        "NotImplementedError: ZeRO-1/2 Universal Checkpoint conversion for AutoEP with tensor "
                        "parallelism is not supported."),
                  ENOTSUP);
    if (ix_.pp != 1)
      throw Error(where(ix_.dir, "AutoEP with pipeline parallelism (pp " + std::to_string(ix_.pp) +
                                     ") is not supported: DeepSpeed's converter has no stage in its expert paths"),
                  ENOTSUP);
    for (const auto& [name, x] : autoep_->experts)
      if (ix_.dp % x.ep_size != 0)
        throw Error(where(ix_.dir, "RuntimeError: ZeRO DP degree " + std::to_string(ix_.dp) +
                                       " is not divisible by AutoEP size " + std::to_string(x.ep_size) + "."),
                    ENOTSUP);
  }

  // [tp §6]: ZeRO-3 + AutoTP; the (t, d) grid comes from the file names, P = 1.
  void run_zero3(const GridFiles& g) {
    int T = 0, D = 0;
    for (const auto& [dm, path] : g.zero_model) D = std::max(D, dm.first + 1), T = std::max(T, dm.second + 1);
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < D; ++d) {
        const bool m = g.zero_model.count({d, t}), o = g.optim.count({d, t});
        if (!m || !o)
          throw FormatError(where(
              ix_.dir + "/" + (m ? optim_states_name(g.prefix, d, t) : zero_model_states_name(d, t)),
              "Missing ZeRO-3 checkpoint file for tp_rank=" + std::to_string(t) + ", dp_rank=" + std::to_string(d)));
      }
    if (g.optim.size() != size_t(T * D))
      throw FormatError(where(ix_.dir, "ZeRO-3 optimizer files do not form a complete (tp, dp) grid"));
    ix_.pp = 1, ix_.tp = T, ix_.dp = D, ix_.mp = T;
    for (int t = 0; t < T; ++t) {
      TagFiles files;
      for (int d = 0; d < D; ++d)
        files.optim.push_back(g.optim.at({d, t})), files.model.push_back(g.zero_model.at({d, t}));
      add_cell(0, t, files, true);
    }
    for (const auto& [dm, path] : g.zero_model) ix_.mp_files.push_back(path);
    std::sort(ix_.mp_files.begin(), ix_.mp_files.end());
    ix_.model_files = {g.zero_model.at({0, 0})};
    finish(g.zero_model.at({0, 0}));
  }

  // Indexes cell (p, t) as a data-parallel checkpoint, then files its parameters under their names.
  void add_cell(int p, int t, const TagFiles& files, bool zero3) {
    TagIndex cell;
    cell.dir = ix_.dir, cell.tag = ix_.tag, cell.dp = ix_.dp, cell.mp = ix_.mp, cell.optim_prefix = ix_.optim_prefix;
    ShardSet shards(cell);
    OpenShard rank0 = shards.open(files.optim[0]);
    const Field osd = rank0.root()["optimizer_state_dict"];
    auto stage = osd.find("zero_stage");
    cell.bf16_optimizer = !stage;
    cell.stage = stage ? int(stage->as_int()) : 1;
    if ((cell.stage == 3) != zero3)
      throw Error(where(files.optim[0], "zero_stage " + std::to_string(cell.stage) + " with these model-state files"),
                  ENOTSUP);
    if (zero3)
      index_zero3(cell, shards, files, rank0);
    else if (cell.stage == 1 || cell.stage == 2)
      index_zero12(cell, shards, files, rank0);
    else
      throw Error(where(files.optim[0], "unsupported zero_stage " + std::to_string(cell.stage)), ENOTSUP);
    const uint32_t base = uint32_t(ix_.shards.size());
    if (p == 0 && t == 0) adopt_globals(cell);
    for (const auto& s : cell.shards) ix_.shards.push_back(s);
    for (const Param& cp : cell.params) {
      auto [it, fresh] = by_name_.emplace(cp.name, ix_.params.size());
      if (fresh) {
        Param np;
        np.name = cp.name;
        np.group = cp.group;
        np.sub_group = zero3 ? -1 : cp.sub_group;
        np.step = cp.step;  // the layouts' state; the universal view of ZeRO-3 + TP writes no step.pt [tp §6]
        ix_.params.push_back(std::move(np));
        holders_.emplace_back(size_t(ix_.tp));
      }
      Holder h{p, cp.shape, {}, cp.group, cp.step};
      for (size_t k = 0; k < cell.state_names.size(); ++k) {
        std::vector<Fragment> frags = cell.fragments(cp, k);
        for (auto& f : frags) f.extent.file += base;
        h.stored.push_back(std::move(frags));
      }
      holders_[it->second][size_t(t)].push_back(std::move(h));
    }
  }

  void adopt_globals(const TagIndex& c) {
    // Per-group states (Muon) are indexed and checked for data-parallel sources only.
    if (!c.group_states.empty() || !c.whole_states.empty())
      throw FormatError(where(ix_.dir,
                              "param groups keep different optimizer states (DeepSpeed's Muon): served for "
                              "data-parallel checkpoints, not yet for tensor- or pipeline-parallel ones"));
    static_cast<OptimizerGlobals&>(ix_) = c;
    ix_.optim_meta = c.optim_meta ? ix_.arena.copy(c.optim_meta) : nullptr;
    ix_.param_groups = c.param_groups ? ix_.arena.copy(c.param_groups) : nullptr;
  }

  // [tp §4.2, §7]: per tp rank, one shape over the stages, and the fragments the converter's
  // extraction would leave: stage 0's for a pipeline-replicated name, else per dp rank the
  // highest stage's.
  void resolve(Param& np, std::vector<std::vector<Holder>>& per_t, const UcInfo& uc) {
    bool pipe_replicated = false;
    for (const auto& pat : uc.pipeline_replicated.patterns) pipe_replicated = pipe_replicated || pat.match(np.name);
    const size_t K = ix_.state_names.size();
    for (size_t t = 0; t < per_t.size(); ++t) {
      auto& hs = per_t[t];
      TpSlice slice;
      slice.stored.resize(K);
      if (hs.empty())
        throw FormatError(where(ix_.dir, "No fragment files for tp rank " + std::to_string(t) + " of " + np.name +
                                             ", a parameter of the other tp ranks"));
      slice.shape = hs[0].shape;
      for (const auto& h : hs)
        if (h.shape != slice.shape)
          throw FormatError(where(ix_.dir, "Pipeline replicas of " + np.name + " on tp rank " + std::to_string(t) +
                                               " disagree on shape: " + pt::shape_text(slice.shape) + " vs " +
                                               pt::shape_text(h.shape)));
      for (int d = 0; d < ix_.dp; ++d) {
        const Holder* pick = nullptr;
        size_t at = 0;
        for (const auto& h : hs) {
          if (pipe_replicated && h.p != 0) continue;
          for (size_t j = 0; j < h.stored[0].size(); ++j)
            if (h.stored[0][j].rank == uint32_t(d) && (!pick || h.p >= pick->p)) pick = &h, at = j;
        }
        if (!pick) continue;
        if (t == 0 && np.step >= 0) np.step = pick->step;
        for (size_t k = 0; k < K; ++k) {
          Fragment f = pick->stored[k][at];
          f.start = 0;
          for (const auto& prev : slice.stored[k]) f.start += prev.numel;
          slice.stored[k].push_back(f);
        }
      }
      uint64_t have = 0;
      for (const auto& f : slice.stored[0]) have += f.numel;
      const uint64_t want = pt::numel(slice.shape);
      if (have != want)
        throw FormatError(where(ix_.dir, np.name + ": RuntimeError: shape '" + pt::shape_text(slice.shape) +
                                             "' is invalid for input of size " + std::to_string(have) +
                                             " (DeepSpeed's converter mixes the ZeRO fragments of pipeline stages that "
                                             "split this tied parameter differently; list it in "
                                             "pipeline_replicated_parameter_patterns to take stage 0's copy)"));
      np.slices.push_back(std::move(slice));
    }
  }

  void finish(const std::string& first_model) {
    TagIndex scratch;
    ShardSet shards(scratch);
    OpenShard first = shards.open(first_model);
    auto info = first.root().find("universal_checkpoint_info");
    if (!info || info->is_none()) throw FormatError(where(first_model, kNoUcInfo));
    const UcInfo uc = read_uc_info(ix_, *info);
    for (size_t k = 0; k < ix_.params.size(); ++k) {
      const AutoEpExpert* x = expert(ix_.params[k].name);
      if (!x) {
        resolve(ix_.params[k], holders_[k], uc);
        continue;
      }
      const Holder& h = holders_[k].at(0).at(0);  // T = P = 1 (check_autoep)
      ix_.params[k].step = h.step;
      merge_autoep_expert(ix_, ix_.params[k], h.shape, h.stored, *x, autoep_->data_before_expert);
    }
    if (autoep_)
      for (const auto& [name, x] : autoep_->experts)
        if (!by_name_.count(name))
          throw FormatError(where(first_model, "RuntimeError: AutoEP expert parameter " + name +
                                                   " is missing from checkpoint parameter shapes."));
    assign_tp_rules(ix_, uc, strict_);  // experts are left out of the rule table (exclude_param_names)
    if (ix_.tp > 1 && !uc.has_any_pattern())
      spdlog::warn(
          "{}: tensor-parallel checkpoint (tp {}) without any universal_checkpoint_info pattern: every "
          "parameter is concatenated on dim 0, TP-replicated ones too, as DeepSpeed's converter does",
          ix_.dir, ix_.tp);
  }

  const AutoEpExpert* expert(const std::string& name) const {
    if (!autoep_) return nullptr;
    auto it = autoep_->experts.find(name);
    return it == autoep_->experts.end() ? nullptr : &it->second;
  }

  TagIndex& ix_;
  bool strict_;
  std::optional<AutoEp> autoep_;
  std::map<std::string, size_t> by_name_;
  std::vector<std::vector<std::vector<Holder>>> holders_;  // [param][t] -> the stages holding it
};

}  // namespace

void index_parallel(TagIndex& index, bool strict) {
  const GridFiles g = collect(index.dir);
  if (g.expert_files) {
    TagIndex scratch;
    ShardSet shards(scratch);
    auto it = g.mp.find(0);
    if (it == g.mp.end()) throw FormatError(where(index.dir + "/" + model_states_name(0), "missing"));
    OpenShard m = shards.open(it->second);
    auto info = m.root().find("universal_checkpoint_info");
    if (!info || info->is_none())
      throw Error(where(it->second, std::string(kNoUcInfo) +
                                        " (a native deepspeed.moe checkpoint: its expert-parallel ranks give their "
                                        "local experts the same names, and DeepSpeed has no universal form for it)"),
                  ENOTSUP);
    auto autoep = read_autoep(index, m.root());
    if (!autoep)
      throw Error(where(it->second,
                        "expert files without ds_autoep_layers: a native deepspeed.moe checkpoint, which DeepSpeed's "
                        "converter does not consolidate (its expert-parallel ranks give their local experts the same "
                        "names)"),
                  ENOTSUP);
    return Grid(index, strict, std::move(autoep)).run();
  }
  Grid(index, strict).run();
}

bool is_parallel_tag(const std::string& dir) {
  const GridFiles g = collect(dir);
  if (g.layer_files || g.expert_files) return true;
  for (const auto& [m, p] : g.mp)
    if (m != 0) return true;
  for (const auto& [dm, p] : g.optim)
    if (dm.second != 0) return true;
  return false;
}

}  // namespace zm::ds
