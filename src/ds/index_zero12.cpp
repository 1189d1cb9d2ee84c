// ZeRO-1/2 and BF16_Optimizer [formats §3.2.1, §3.2.2, §4.1]: each rank's param_slice_mappings
// says where each parameter's piece starts in that rank's flat fp32 partition and Adam moments.
#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>

#include "builders.h"
#include "model_states.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"

namespace zm::ds {

namespace {

using NameIndex = std::unordered_map<std::string, size_t>;

// Rank 0's optimizer-level values, minus the per-rank tensors, as ds_to_universal keeps them.
const pt::Node* copy_meta(pt::Arena& arena, const Field& osd, int world, size_t groups) {
  static const char* kDropped[] = {"base_optimizer_state", "single_partition_of_fp32_groups", "param_slice_mappings"};
  pt::Node* meta = arena.make(pt::Kind::Dict);
  for (const auto& [k, v] : osd.node()->entries) {
    if (k->kind != pt::Kind::Str || std::find(std::begin(kDropped), std::end(kDropped), k->s) != std::end(kDropped))
      continue;
    const pt::Node* value = nullptr;
    if (k->s == "group_paddings" || k->s == "partition_count") {
      pt::Node* list = arena.make(pt::Kind::List);
      for (size_t g = 0; g < groups; ++g) list->items.push_back(arena.make_int(k->s == "partition_count" ? world : 0));
      value = list;
    } else {
      value = arena.copy(v);
    }
    meta->entries.emplace_back(arena.make_str(k->s), value);
  }
  return meta;
}

// An elastic save has no param_groups: one {'params': [g]} per group, which a universal load
// reads as "keep the engine's hyper-parameters", what a native load of an elastic save does.
const pt::Node* params_only_groups(pt::Arena& arena, size_t groups) {
  pt::Node* list = arena.make(pt::Kind::List);
  for (size_t g = 0; g < groups; ++g) {
    pt::Node* ids = arena.make(pt::Kind::List);
    ids->items.push_back(arena.make_int(int64_t(g)));
    pt::Node* group = arena.make(pt::Kind::Dict);
    group->entries.emplace_back(arena.make_str("params"), ids);
    list->items.push_back(group);
  }
  return list;
}

// param_shapes: the trainable parameters in flat-buffer order, each group after the previous.
void read_trainable(TagIndex& index, const Field& root) {
  const auto groups = read_param_shapes(root);
  index.num_groups = int(groups.size());
  NameIndex seen;
  for (size_t g = 0; g < groups.size(); ++g)
    for (const auto& [name, shape] : groups[g]) {
      if (!seen.emplace(name, index.params.size()).second)
        root["param_shapes"].fail("parameter '" + name + "' appears twice");
      index.params.push_back(Param{name, shape, pt::numel(shape), int(g), -1, int(g), {}});
    }
}

// Stage 2 saves each frozen parameter whole, as zero_to_fp32 emits it; stage 1 and BF16_Optimizer
// save none there (their frozen parameters are only in 'module').
void read_frozen_fragments(TagIndex& index, const OpenShard& model) {
  const Field root = model.root();
  auto shapes = root.find("frozen_param_shapes");
  if (!shapes || shapes->is_none()) return;
  const Field frags = root["frozen_param_fragments"];
  for (const auto& [name, shape] : shapes->items()) {
    const Field t = frags[name];
    PlainTensor f{name, t.as_tensor().dtype, shape.as_shape(), {}};
    f.data.push_back(ShardSet::slice(t, model.id, 0, pt::numel(f.shape), "frozen parameter " + name));
    index.frozen.push_back(std::move(f));
  }
}

void read_model_file(TagIndex& index, ShardSet& shards, const TagFiles& files) {
  const std::string& path = files.model.at(0);
  OpenShard model = shards.open(path);
  read_model_common(index, model);
  read_trainable(index, model.root());
  if (index.params.empty()) throw FormatError(where(path, "param_shapes lists no trainable parameters"));
  read_frozen_fragments(index, model);
  std::set<std::string> experts;
  for (const auto& [name, dp] : files.expert_dp) experts.insert(name);
  read_module(index, model, true, experts);
}

// How many ranks each param group is partitioned over: all dp ranks, or expert-DP for AutoEP's
// expert groups.
std::vector<int> group_partitions(const TagIndex& index, const TagFiles& files) {
  std::vector<int> out(size_t(index.num_groups), index.dp);
  for (const auto& p : index.params)
    if (auto it = files.expert_dp.find(p.name); it != files.expert_dp.end()) out.at(size_t(p.group)) = it->second;
  return out;
}

// The parts of one rank's optimizer_state_dict the layout comes from.
struct RankState {
  Field osd, base, fp32, maps;
  bool elastic = false;
  std::vector<std::optional<Field>> groups;  // each group's optimizer state; nullopt: never stepped
  std::vector<StateKeys> keys;               // each group's keys, split as DeepSpeed splits them
  std::vector<bool> muon;                    // each group's use_muon (rigid saves keep it)
  std::vector<uint64_t> lengths;             // each group's partitioned state tensors' length
  const Field* group(size_t g) const { return groups[g] ? &*groups[g] : nullptr; }
};

// A rigid save keeps torch's {'state': {g: ...}, 'param_groups'}, an elastic one a list of
// per-group states cut to the valid elements; before the first step every group's state is {}.
std::vector<std::optional<Field>> group_states(const Field& base, bool elastic, size_t G) {
  std::vector<std::optional<Field>> out(G);
  const Field state = elastic ? base : base["state"];
  if (state.size() == 0) return out;
  if (state.size() != G)
    state.fail("holds the state of " + std::to_string(state.size()) + " param groups, not of all " + std::to_string(G) +
               " (or none, before the first step)");
  for (size_t g = 0; g < G; ++g) {
    out[g] = elastic ? state[g] : state.at(int64_t(g));
    if (out[g]->size() == 0) out[g].reset();
  }
  return out;
}

// Where the pieces found so far end in a parameter's flat order (they are appended in rank order).
uint64_t stored_end(const std::vector<Fragment>& pieces) {
  return pieces.empty() ? 0 : pieces.back().start + pieces.back().numel;
}

// Which groups are DeepSpeed Muon's (engine.py: use_muon in the param group). An elastic save keeps
// no param groups and cuts every state tensor to the partition's valid elements, which cuts
// Muon's whole-parameter buffers too: DeepSpeed cannot reload such a save, so it is refused.
std::vector<bool> muon_groups(const RankState& rs, size_t G) {
  std::vector<bool> out(G, false);
  if (rs.elastic) {
    for (size_t g = 0; g < G; ++g)
      if (rs.group(g) && rs.group(g)->find("momentum_buffer"))
        rs.group(g)->fail(
            "an elastic save of a Muon run: DeepSpeed cut its whole-parameter momentum buffers to the "
            "partition's length, and neither it nor zeromount can put them back together");
    return out;
  }
  const Field groups = rs.base["param_groups"];
  for (size_t g = 0; g < G && g < groups.size(); ++g)
    if (auto u = groups[g].find("use_muon"); u && u->is(pt::Kind::Bool)) out[g] = u->node()->b;
  return out;
}

RankState rank_state(const OpenShard& shard, const TagIndex& index, const std::vector<int>& partitions) {
  const Field osd = shard.root()["optimizer_state_dict"];
  RankState rs{osd, osd["base_optimizer_state"], osd["single_partition_of_fp32_groups"], osd["param_slice_mappings"]};
  rs.elastic = rs.base.is(pt::Kind::List);
  if (!rs.elastic && !rs.base.is(pt::Kind::Dict))
    rs.base.fail("expected a dict (rigid) or a list (elastic_checkpoint), found " + pt::repr(rs.base.node()));
  const size_t G = size_t(index.num_groups);
  for (const Field& f : {rs.fp32, rs.maps})
    if (f.size() != G)
      f.fail("has " + std::to_string(f.size()) + " param groups, param_shapes in the model file has " +
             std::to_string(G));
  rs.groups = group_states(rs.base, rs.elastic, G);
  rs.muon = muon_groups(rs, G);
  const auto paddings = osd.find("group_paddings");
  for (size_t g = 0; g < G; ++g) {
    // The state tensors' length: the padded partition; BF16_Optimizer's fp32 keeps its padding, and
    // an elastic save cuts the padding off every state tensor.
    uint64_t partition = rs.fp32[g].as_tensor().numel();
    if (!index.bf16_optimizer && !rs.elastic && paddings) partition += uint64_t((*paddings)[g].as_int());
    rs.keys.push_back(split_state(rs.group(g), partition, rs.muon[g]));
    rs.lengths.push_back(partition);
  }
  if (auto pc = osd.find("partition_count"); pc && pc->is(pt::Kind::List))
    for (size_t g = 0; g < pc->size(); ++g)
      if ((*pc)[g].as_int() != partitions.at(g))
        (*pc)[g].fail("partition_count " + std::to_string((*pc)[g].as_int()) + " differs from the " +
                      std::to_string(partitions.at(g)) + (partitions.at(g) == index.dp ? " dp" : " expert-dp") +
                      " ranks found");
  return rs;
}

// Rank 0 names the states, the master dtype, the loss scaler and the values copied for the view.
void read_rank0_layout(TagIndex& index, const RankState& rs) {
  adopt_state_keys(index, rs.keys, rs.base);
  index.elastic = rs.elastic;
  index.master_dtype = rs.fp32[0].as_tensor().dtype;
  for (auto& p : index.params) p.stored.resize(index.state_names.size());
  index.optim_meta = copy_meta(index.arena, rs.osd, index.dp, size_t(index.num_groups));
  index.param_groups = rs.elastic ? params_only_groups(index.arena, size_t(index.num_groups))
                                  : index.arena.copy(rs.base["param_groups"].node());
  index.loss_scaler = read_loss_scaler(rs.osd);
}

// Every group of every rank has rank 0's state keys for that group, and all its tensors the master
// dtype.
void check_group_state(const TagIndex& index, const RankState& rs, const StateKeys& want, size_t g) {
  if (rs.elastic != index.elastic) rs.base.fail("rigid and elastic (list) optimizer states mixed across ranks");
  check_state_keys(index, want, rs.keys.at(g), rs.group(g), rs.group(g) ? *rs.group(g) : rs.base, rs.lengths.at(g));
  require_dtype(rs.fp32[g], index.master_dtype, "the master weights of group 0");
  for (const auto* keys : {&rs.keys[g].flat, &rs.keys[g].whole})
    for (const auto& k : *keys) require_dtype((*rs.group(g))[k], index.master_dtype, "the master weights");
}

// Muon's buffers of group g on this rank: the whole buffer of each parameter the partition touches,
// back to back in partition order (`order`). The first rank's copy is the one served; a parameter
// that spans ranks has a copy on each, which must hold the same bytes (`spanning`: the hash of the
// first copy, while later ranks still hold one).
void add_whole_buffers(TagIndex& index, const RankState& rs, size_t g, uint32_t rank, const OpenShard& shard,
                       const std::vector<size_t>& order, std::unordered_map<size_t, uint64_t>& spanning) {
  for (size_t k = 1; k < index.state_names.size(); ++k) {
    if (!index.whole(k) || !index.group_has(g, k)) continue;  // every group alike: each keeps it
    const Field buf = (*rs.group(g))[index.state_names[k]];
    uint64_t at = 0;
    for (size_t i : order) {
      Param& p = index.params[i];
      const std::string what = "parameter " + p.name + " (" + index.state_names[k] + ")";
      const pt::Extent e = ShardSet::slice(buf, shard.id, at, p.numel, what);
      at += p.numel;
      const uint64_t held = stored_end(p.stored[0]);  // p's elements up to this rank's piece's end
      if (p.stored[k].empty()) {
        p.stored[k].push_back({rank, 0, p.numel, e});
        if (held < p.numel) spanning[i] = pt::hash_range(shard.pt->file, e.offset, e.length);
        continue;
      }
      const auto it = spanning.find(i);
      if (it == spanning.end() || pt::hash_range(shard.pt->file, e.offset, e.length) != it->second)
        buf.fail(what + ": this rank's copy of the whole buffer differs from rank " +
                 std::to_string(p.stored[k][0].rank) + "'s (in " + index.shards.at(p.stored[k][0].extent.file).path +
                 "): one of the two copies is damaged, and nothing says which");
      if (held == p.numel) spanning.erase(it);
    }
    if (at != buf.as_tensor().numel())
      buf.fail("holds " + std::to_string(buf.as_tensor().numel()) + " elements, the whole buffers of the " +
               std::to_string(order.size()) + " parameters this partition touches hold " + std::to_string(at) +
               " (Muon keeps each one whole on every rank that holds a piece)");
  }
}

// Appends this rank's piece of each parameter its param_slice_mappings[g] lists; returns those
// parameters in partition order.
std::vector<size_t> add_rank_pieces(TagIndex& index, const RankState& rs, size_t g, uint32_t rank, uint32_t shard,
                                    const NameIndex& by_name) {
  const Field* gstate = rs.group(g);
  std::vector<std::pair<uint64_t, size_t>> starts;  // (start in the partition, param)
  for (const auto& [name, fa] : rs.maps[g].items()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) fa.fail("parameter is not in param_shapes of the model file");
    Param& p = index.params[it->second];
    if (p.group != int(g)) fa.fail("parameter belongs to param group " + std::to_string(p.group));
    const int64_t start = fa.attr("start").as_int(), numel = fa.attr("numel").as_int();
    if (start < 0 || numel < 0) fa.fail("negative fragment address");
    const uint64_t at = stored_end(p.stored[0]);
    const std::string what = "parameter " + name;
    for (size_t k = 0; k < index.state_names.size(); ++k) {
      if (!index.has(p, k) || index.whole(k)) continue;  // whole buffers: add_whole_buffers
      const Field t = k == 0 ? rs.fp32[g] : (*gstate)[index.state_names[k]];
      p.stored[k].push_back({rank, at, uint64_t(numel), ShardSet::slice(t, shard, start, numel, what)});
    }
    starts.emplace_back(uint64_t(start), it->second);
  }
  // Two parameters may not claim the same elements of one partition.
  std::sort(starts.begin(), starts.end());
  std::vector<size_t> order;
  for (size_t k = 0; k < starts.size(); ++k) {
    order.push_back(starts[k].second);
    if (k == 0) continue;
    const Param& prev = index.params[starts[k - 1].second];
    if (starts[k - 1].first + prev.stored[0].back().numel > starts[k].first)
      rs.maps[g].fail("fragments of '" + prev.name + "' and '" + index.params[starts[k].second].name + "' overlap");
  }
  return order;
}

// The pieces of every parameter add up to its shape: otherwise the files disagree.
void check_complete(const TagIndex& index, const TagFiles& files) {
  const std::string& model_file = files.model.at(0);
  for (const auto& p : index.params) {
    uint64_t have = 0, copies = 1;
    for (const auto& f : p.stored[0]) have += f.numel;
    if (auto it = files.expert_dp.find(p.name); it != files.expert_dp.end()) copies = uint64_t(index.dp / it->second);
    if (have != p.numel * copies)
      throw FormatError(where(index.dir, "parameter '" + p.name + "': the optimizer files hold " +
                                             std::to_string(have) + " elements, its shape in " + model_file +
                                             " needs " + std::to_string(p.numel * copies)));
  }
}

}  // namespace

void index_zero12(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0) {
  index.optimizer = index.bf16_optimizer ? OptimizerClass::BF16_Optimizer : OptimizerClass::DeepSpeedZeroOptimizer;
  read_model_file(index, shards, files);
  const std::vector<int> partitions = group_partitions(index, files);
  NameIndex by_name;
  for (size_t k = 0; k < index.params.size(); ++k) by_name.emplace(index.params[k].name, k);
  std::vector<StateKeys> want;  // rank 0's keys of each group: every rank's groups keep them
  std::unordered_map<size_t, uint64_t> spanning;
  for (int r = 0; r < index.dp; ++r) {
    OpenShard shard = r == 0 ? std::move(rank0) : shards.open(files.optim[size_t(r)]);
    const RankState rs = rank_state(shard, index, partitions);
    if (r == 0) read_rank0_layout(index, rs), want = rs.keys;
    for (size_t g = 0; g < size_t(index.num_groups); ++g) {
      check_group_state(index, rs, want.at(g), g);
      if (r == 0) index.scalars.push_back(read_scalars(index, rs.group(g), shard.id));
      const auto order = add_rank_pieces(index, rs, g, uint32_t(r), shard.id, by_name);
      if (!index.whole_states.empty()) add_whole_buffers(index, rs, g, uint32_t(r), shard, order, spanning);
    }
  }
  check_complete(index, files);
}

}  // namespace zm::ds
