// Target layouts [layouts §3, §6]: names, and DeepSpeed's partition arithmetic at a
// stage, DP size and precision other than the source's.
#include "zeromount/ds/target_layout.h"

#include <algorithm>
#include <array>

#include "zeromount/ds/model_root.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"

namespace zm::ds {

namespace {

constexpr std::array<std::string_view, 3> kPrecisionNames = {"fp32", "fp16", "bf16"};
constexpr uint64_t kMaxSubGroupSize = uint64_t(INT64_MAX);

bool take(std::string_view& s, std::string_view literal) {
  if (!s.starts_with(literal)) return false;
  s.remove_prefix(literal.size());
  return true;
}

// A decimal in [1, max] without sign or leading zeros: the only spelling of a number in a name.
std::optional<uint64_t> take_number(std::string_view& s, uint64_t max) {
  size_t n = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || s[0] == '0') return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t d = uint64_t(s[i] - '0');
    if (v > (max - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  s.remove_prefix(n);
  return v;
}

[[noreturn]] void refuse(const TagIndex& index, const TargetLayout& target, const std::string& why) {
  throw Error(where(index.dir, "cannot present as " + target_name(target) + ": " + why), EINVAL);
}

// Trainable params per param group in param_group['params'] order [layouts §3.1] ("Param order").
std::vector<std::vector<uint32_t>> param_order(const TagIndex& index, const SourceOptions& source) {
  std::vector<std::vector<uint32_t>> groups(size_t(std::max(index.num_groups, 0)));
  for (size_t k = 0; k < index.params.size(); ++k) groups.at(size_t(index.params[k].group)).push_back(uint32_t(k));
  // A stage-1/2 source lists params in its flat order; undo its round robin (bucket i % W).
  const uint64_t W = uint64_t(index.dp);
  if (index.stage == 3 || index.bf16_optimizer || !source.round_robin || W <= 1) return groups;
  for (auto& flat : groups) {
    std::vector<uint32_t> original(flat.size());
    size_t at = 0;
    for (uint64_t bucket = 0; bucket < W && bucket < flat.size(); ++bucket)
      for (uint64_t i = bucket; i < flat.size(); i += W) original[i] = flat[at++];
    flat = std::move(original);
  }
  return groups;
}

// stage_1_and_2.py _round_robin_reorder: buckets i % W in order, original order inside each.
std::vector<uint32_t> round_robin_reorder(const std::vector<uint32_t>& params, uint64_t W) {
  std::vector<uint32_t> out;
  out.reserve(params.size());
  for (uint64_t bucket = 0; bucket < W && bucket < params.size(); ++bucket)
    for (uint64_t i = bucket; i < params.size(); i += W) out.push_back(params[i]);
  return out;
}

std::vector<uint64_t> running_offsets(const TagIndex& index, const std::vector<uint32_t>& params) {
  std::vector<uint64_t> out;
  out.reserve(params.size());
  uint64_t at = 0;
  for (uint32_t k : params) {
    out.push_back(at);
    at += index.params[k].numel;
  }
  return out;
}

// The overlap of each param with flat [lo, hi), as get_hp_fragment_mapping cuts it. Offsets are
// non-decreasing, so the first overlapping param is found by binary search: O(log n + pieces).
std::vector<FragmentAddress> overlap(const TagIndex& index, const std::vector<uint32_t>& params,
                                     const std::vector<uint64_t>& offsets, uint64_t lo, uint64_t hi) {
  std::vector<FragmentAddress> out;
  const auto end_of = [&](size_t k) { return offsets[k] + index.params[params[k]].numel; };
  size_t first = 0, count = params.size();
  while (count > 0) {
    const size_t half = count / 2;
    if (end_of(first + half) <= lo) {
      first += half + 1;
      count -= half + 1;
    } else {
      count = half;
    }
  }
  for (size_t k = first; k < params.size() && offsets[k] < hi; ++k) {
    if (index.params[params[k]].numel == 0) continue;  // never gets a fragment [layouts §3.1]
    const uint64_t s = std::max(offsets[k], lo), e = std::min(end_of(k), hi);
    out.push_back({params[k], s - offsets[k], e - s, s - lo});
  }
  return out;
}

FlatGroup plan_flat_group(const TagIndex& index, const TargetLayout& target, std::vector<uint32_t> params) {
  const uint64_t W = target.dp, align = 2 * W;  // nccl_start_alignment_factor = 2, hard-coded
  FlatGroup g;
  g.offsets = running_offsets(index, params);
  g.flat = target.round_robin ? round_robin_reorder(params, W) : params;
  g.flat_offsets = running_offsets(index, g.flat);
  g.params = std::move(params);
  for (uint32_t k : g.params) g.numel += index.params[k].numel;
  g.padded = (g.numel + align - 1) / align * align;
  g.partition = g.padded / W;
  return g;
}

// stage3.py _create_fp16_sub_groups, with partition_numel = ceil(n / W').
void plan_sub_groups(const TagIndex& index, const TargetLayout& target, int group, const std::vector<uint32_t>& params,
                     PartitionPlan& plan) {
  auto& ids = plan.group_sub_groups.emplace_back();
  if (params.empty()) return;  // stays in param_groups with 'params': []
  uint64_t total = 0;
  for (uint32_t k : params) total += zero3_partition(index.params[k].numel, target.dp);
  const bool whole = target.sub_group_size >= total;
  SubGroup current{group, {}, {}, 0};
  for (size_t j = 0; j < params.size(); ++j) {
    current.params.push_back(params[j]);
    current.offsets.push_back(current.numel);
    current.numel += zero3_partition(index.params[params[j]].numel, target.dp);
    if ((!whole && current.numel >= target.sub_group_size) || j + 1 == params.size()) {
      ids.push_back(uint32_t(plan.sub_groups.size()));
      plan.sub_groups.push_back(std::move(current));
      current = SubGroup{group, {}, {}, 0};
    }
  }
}

// A parallel source is presented merged to TP = PP = 1, made of its stored bytes: what a TP=1
// engine's module and flat partitions hold (its universal tensors). Refused where that state is
// not in the files as it would be at TP = 1.
void check_parallel_source(const TagIndex& index, const TargetLayout& target) {
  if (!index.parallel()) return;
  if (index.pp > 1)
    refuse(index, target,
           "a pipeline-parallel source: a PipelineEngine keeps its weights in layer_*-model_states.pt files, which a "
           "fake does not write (load <T>_universal/ instead)");
  if (index.autoep())
    refuse(index, target,
           "an AutoEP source: its experts' weights are in expert files and its engine's layout is not a TP=1 one "
           "(load <T>_universal/ instead)");
  for (const Param& p : index.params)
    if (p.rule == TpRule::Averaged)
      refuse(index, target,
             "'" + p.name +
                 "' is averaged over its tensor-parallel copies (parameter_to_average_patterns): its TP=1 value is "
                 "computed, not stored (load <T>_universal/ instead)");
  for (const Param& p : index.params)
    if (p.vocab && p.merged_numel != p.numel)
      refuse(index, target,
             "vocabulary parameter '" + p.name + "' is padded to " + std::to_string(p.merged_numel) +
                 " elements for TP=" + std::to_string(index.tp) + " (original_vocab_size " +
                 std::to_string(index.original_vocab_size) +
                 "): how a TP=1 model pads it is not in the checkpoint (load <T>_universal/ instead)");
}

bool enabled(const pt::Node* config, std::string_view key) {
  const pt::Node* section = config->get(key);
  const pt::Node* on = section ? section->get("enabled") : nullptr;
  return on && on->kind == pt::Kind::Bool && on->b;
}

}  // namespace

std::vector<std::vector<uint32_t>> group_param_order(const TagIndex& index, const SourceOptions& source) {
  return param_order(index, source);
}

std::optional<TargetLayout> parse_target(std::string_view s) {
  TargetLayout t;
  if (take(s, "bf16opt-dp")) {
    auto W = take_number(s, kMaxLayoutDp);
    if (!W || !s.empty()) return std::nullopt;
    t.stage = TargetStage::Bf16Opt;
    t.dp = uint32_t(*W);
    t.precision = Precision::Bf16;
    return t;
  }
  if (take(s, "zero1"))
    t.stage = TargetStage::Zero1;
  else if (take(s, "zero2"))
    t.stage = TargetStage::Zero2;
  else if (take(s, "zero3"))
    t.stage = TargetStage::Zero3;
  else
    return std::nullopt;
  if (!take(s, "-dp")) return std::nullopt;
  auto W = take_number(s, kMaxLayoutDp);
  if (!W || !take(s, "-")) return std::nullopt;
  t.dp = uint32_t(*W);
  size_t p = 0;
  while (p < kPrecisionNames.size() && !take(s, kPrecisionNames[p])) ++p;
  if (p == kPrecisionNames.size()) return std::nullopt;
  t.precision = Precision(p);
  if (t.stage != TargetStage::Zero3) {
    t.round_robin = take(s, "-rr");
  } else if (take(s, "-sg")) {
    auto N = take_number(s, kMaxSubGroupSize);
    if (!N || *N == kDefaultSubGroupSize) return std::nullopt;  // the default is spelled by omission
    t.sub_group_size = *N;
  }
  if (!s.empty()) return std::nullopt;
  return t;
}

std::string target_name(const TargetLayout& t) {
  const std::string dp = "-dp" + std::to_string(t.dp);
  if (t.stage == TargetStage::Bf16Opt) return "bf16opt" + dp;
  std::string name =
      "zero" + std::to_string(int(t.stage) + 1) + dp + "-" + std::string(kPrecisionNames.at(size_t(t.precision)));
  if (t.round_robin) name += "-rr";
  if (t.sub_group_size != kDefaultSubGroupSize) name += "-sg" + std::to_string(t.sub_group_size);
  return name;
}

SourceOptions source_options(const TagIndex& index) {
  const std::shared_ptr<const pt::Node> root = model_root(index);
  return root ? source_options(index, root.get()) : SourceOptions{};
}

SourceOptions source_options(const TagIndex& index, const pt::Node* model_root) {
  SourceOptions o;
  const pt::Node* config = model_root ? model_root->get("ds_config") : nullptr;
  if (!config || config->kind != pt::Kind::Dict) return o;  // old checkpoints may hold a path
  if (const pt::Node* zero = config->get("zero_optimization")) {
    if (const pt::Node* rr = zero->get("round_robin_gradients"); rr && rr->kind == pt::Kind::Bool)
      o.round_robin = rr->b && index.stage != 3 && !index.bf16_optimizer;
    // JSON configs often say 1e9, which Python keeps as a float.
    if (const pt::Node* sg = zero->get("sub_group_size")) {
      if (sg->kind == pt::Kind::Int && sg->i > 0) o.sub_group_size = uint64_t(sg->i);
      if (sg->kind == pt::Kind::Float && sg->f >= 1 && sg->f <= 9.2e18) o.sub_group_size = uint64_t(sg->f);
    }
  }
  if (enabled(config, "bf16") || enabled(config, "bfloat16"))
    o.precision = Precision::Bf16;
  else if (enabled(config, "fp16"))
    o.precision = Precision::Fp16;
  else if (config->get("bf16") || config->get("fp16"))
    o.precision = Precision::Fp32;
  return o;
}

TargetLayout source_layout(const TagIndex& index, const SourceOptions& o) {
  TargetLayout t;
  t.dp = uint32_t(index.dp);
  if (index.bf16_optimizer) {
    t.stage = TargetStage::Bf16Opt;
    t.precision = Precision::Bf16;
    return t;
  }
  t.stage = index.stage == 3 ? TargetStage::Zero3 : index.stage == 2 ? TargetStage::Zero2 : TargetStage::Zero1;
  if (o.precision) {
    t.precision = *o.precision;
  } else if (index.optim_prefix == "bf16_") {
    t.precision = Precision::Bf16;
  } else {
    // Without a config, only a dynamic loss scaler tells fp16 from fp32.
    t.precision = index.loss_scaler.kind == LossScaler::Dynamic ? Precision::Fp16 : Precision::Fp32;
  }
  if (t.stage == TargetStage::Zero3)
    t.sub_group_size = o.sub_group_size;
  else
    t.round_robin = o.round_robin;
  return t;
}

TargetLayout source_layout(const TagIndex& index) {
  return source_layout(index, source_options(index));
}

std::string native_layout_refusal(const TagIndex& index) {
  if (index.optimizer_saved) return "";
  return "a " + index.source_style + " save holds no optimizer state, which a native layout's files are made of";
}

PartitionPlan plan_partitions(const TagIndex& index, const TargetLayout& target, const SourceOptions& source) {
  if (target.dp < 1 || target.dp > kMaxLayoutDp)
    refuse(index, target, "DP size must be 1.." + std::to_string(kMaxLayoutDp) + " (fake-layouts.md §6)");
  const bool zero3 = target.stage == TargetStage::Zero3;
  if ((target.round_robin && (zero3 || target.stage == TargetStage::Bf16Opt)) ||
      (!zero3 && target.sub_group_size != kDefaultSubGroupSize) ||
      (target.stage == TargetStage::Bf16Opt && target.precision != Precision::Bf16))
    refuse(index, target,
           "not a layout of fake-layouts.md §6 (-rr is ZeRO-1/2 only, -sg ZeRO-3 only, bf16opt is bf16)");
  if (index.master_dtype != pt::DType::F32)
    refuse(
        index, target,
        "the source's master weights are " + std::string(pt::dtype_name(index.master_dtype)) +
            " (fp16/bf16_master_weights_and_gradients); only fp32 masters are re-partitioned (fake-layouts.md §3.1)");
  if (index.num_groups < 1 || index.params.empty()) refuse(index, target, "the source has no trainable parameter");
  if (const std::string why = native_layout_refusal(index); !why.empty()) refuse(index, target, why);
  if (!index.whole_states.empty() && (zero3 || target.stage == TargetStage::Bf16Opt))
    refuse(index, target,
           "the source ran DeepSpeed's Muon, whose whole-parameter momentum buffers only ZeRO-1/2 keep: ZeRO-3 "
           "refuses Muon (\"Muon and reduce scatter cannot be used together\") and BF16_Optimizer has no Muon "
           "step");
  check_parallel_source(index, target);
  if (index.elastic && (zero3 || target.stage == TargetStage::Bf16Opt))
    refuse(index, target,
           "the source was saved with elastic_checkpoint, without its param groups' hyper-parameters, and a "
           "ZeRO-3 or BF16_Optimizer load takes them from the file; only ZeRO-1/2 targets, which DeepSpeed loads "
           "from the elastic form, are made (fake-layouts.md §3.1)");
  PartitionPlan plan;
  plan.target = target;
  plan.num_groups = index.num_groups;
  auto order = param_order(index, source);
  for (size_t g = 0; g < order.size(); ++g) {
    if (zero3) {
      plan_sub_groups(index, target, int(g), order[g], plan);
      continue;
    }
    // DeepSpeedZeroOptimizer and BF16_Optimizer index bit16_groups[g][0].
    if (order[g].empty())
      refuse(index, target,
             "param group " + std::to_string(g) +
                 " has no trainable parameter; ZeRO-1/2 and BF16_Optimizer need one in every group (fake-layouts.md "
                 "§3.1)");
    plan.groups.push_back(plan_flat_group(index, target, std::move(order[g])));
  }
  return plan;
}

PartitionPlan plan_partitions(const TagIndex& index, const TargetLayout& target) {
  return plan_partitions(index, target, source_options(index));
}

RankPartition rank_slice(const PartitionPlan& plan, const TagIndex& index, uint32_t rank, size_t group) {
  const FlatGroup& g = plan.groups.at(group);
  const uint64_t W = plan.target.dp;
  if (rank >= W) throw Error("rank " + std::to_string(rank) + " is outside DP size " + std::to_string(W), EINVAL);
  const uint64_t lo = uint64_t(rank) * g.partition, hi = lo + g.partition;
  RankPartition r;
  r.partition = g.partition;
  r.valid = g.numel <= lo ? 0 : std::min(g.numel - lo, g.partition);
  if (plan.target.stage == TargetStage::Bf16Opt) {
    r.fp32_numel = g.partition;  // BF16_Optimizer keeps its padding
    r.padding = rank + 1 == W ? g.padded - g.numel : 0;
  } else {
    r.fp32_numel = r.valid;
    r.padding = g.partition - r.valid;
  }
  r.mappings = overlap(index, g.params, g.offsets, lo, hi);
  return r;
}

RankSubGroup rank_sub_group(const PartitionPlan& plan, const TagIndex& index, uint32_t rank, size_t sub_group) {
  const SubGroup& s = plan.sub_groups.at(sub_group);
  const uint64_t W = plan.target.dp;
  if (rank >= W) throw Error("rank " + std::to_string(rank) + " is outside DP size " + std::to_string(W), EINVAL);
  RankSubGroup out;
  out.numel = s.numel;
  for (size_t j = 0; j < s.params.size(); ++j) {
    const uint64_t n = index.params[s.params[j]].numel, part = zero3_partition(n, W);
    if (const uint64_t valid = valid_on_rank(n, part, rank))
      out.pieces.push_back({s.params[j], part * rank, valid, s.offsets[j]});
  }
  return out;
}

}  // namespace zm::ds
