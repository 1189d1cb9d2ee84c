// ZeRO-1/2 and BF16_Optimizer (spec §3.2.1, §3.2.2, §4.1): each rank's param_slice_mappings
// says where each parameter's piece starts in that rank's flat fp32 partition and Adam moments.
#include <algorithm>
#include <set>
#include <unordered_map>

#include "builders.h"
#include "model_states.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

namespace {

using NameIndex = std::unordered_map<std::string, size_t>;

// Rank 0's optimizer-level values, minus the per-rank tensors, as ds_to_universal keeps them.
const pt::Node* copy_meta(pt::Arena& arena, const Field& osd, int world, size_t groups) {
  static const char* kDropped[] = {"base_optimizer_state", "single_partition_of_fp32_groups", "param_slice_mappings",
                                   "base_optimizer_state_step"};
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

// param_shapes: the trainable parameters in flat-buffer order, each group after the previous.
void read_trainable(TagIndex& index, const Field& root) {
  const auto groups = read_param_shapes(root);
  index.num_groups = int(groups.size());
  NameIndex seen;
  for (size_t g = 0; g < groups.size(); ++g)
    for (const auto& [name, shape] : groups[g]) {
      if (!seen.emplace(name, index.params.size()).second)
        root["param_shapes"].fail("parameter '" + name + "' appears twice");
      index.params.push_back(Param{name, shape, numel_of(shape), int(g), -1, int(g), {}});
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
    f.data.push_back(ShardSet::slice(t, model.id, 0, numel_of(f.shape), "frozen parameter " + name));
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
  Field osd, base, state, fp32, maps;
};

RankState rank_state(const OpenShard& shard, const TagIndex& index, const std::vector<int>& partitions) {
  const Field osd = shard.root()["optimizer_state_dict"];
  const Field base = osd["base_optimizer_state"];
  if (!base.is(pt::Kind::Dict))
    base.fail("elastic (list) optimizer state is not supported; save with elastic_checkpoint=false");
  RankState rs{osd, base, base["state"], osd["single_partition_of_fp32_groups"], osd["param_slice_mappings"]};
  const size_t G = size_t(index.num_groups);
  if (rs.fp32.size() != G || rs.maps.size() != G || rs.state.size() != G)
    osd.fail("has " + std::to_string(rs.maps.size()) + " param groups, param_shapes in the model file has " +
             std::to_string(G));
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
  index.state_names = {"fp32"};
  for (auto& k : state_keys(rs.state.at(0))) index.state_names.push_back(k);
  index.master_dtype = rs.fp32[0].as_tensor().dtype;
  for (auto& p : index.params) p.stored.resize(index.state_names.size());
  index.optim_meta = copy_meta(index.arena, rs.osd, index.dp, size_t(index.num_groups));
  index.param_groups = index.arena.copy(rs.base["param_groups"].node());
  index.loss_scaler = read_loss_scaler(rs.osd);
}

// Every group of every rank has rank 0's state keys, and all its tensors the master dtype.
void check_group_state(const TagIndex& index, const RankState& rs, size_t g) {
  const Field gstate = rs.state.at(int64_t(g));
  const auto keys = state_keys(gstate);
  if (!std::equal(keys.begin(), keys.end(), index.state_names.begin() + 1, index.state_names.end()) ||
      keys.size() + 1 != index.state_names.size())
    gstate.fail("optimizer state keys differ from rank 0's");
  require_dtype(rs.fp32[g], index.master_dtype, "the master weights of group 0");
  for (size_t k = 1; k < index.state_names.size(); ++k)
    require_dtype(gstate[index.state_names[k]], index.master_dtype, "the master weights");
}

// Appends this rank's piece of each parameter its param_slice_mappings[g] lists.
void add_rank_pieces(TagIndex& index, const RankState& rs, size_t g, uint32_t rank, uint32_t shard,
                     const NameIndex& by_name) {
  const Field gstate = rs.state.at(int64_t(g));
  std::vector<std::pair<uint64_t, size_t>> starts;  // (start in the partition, param)
  for (const auto& [name, fa] : rs.maps[g].items()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) fa.fail("parameter is not in param_shapes of the model file");
    Param& p = index.params[it->second];
    if (p.group != int(g)) fa.fail("parameter belongs to param group " + std::to_string(p.group));
    const int64_t start = fa.attr("start").as_int(), numel = fa.attr("numel").as_int();
    if (start < 0 || numel < 0) fa.fail("negative fragment address");
    uint64_t at = 0;
    for (const auto& f : p.stored[0]) at += f.numel;
    const std::string what = "parameter " + name;
    for (size_t k = 0; k < index.state_names.size(); ++k) {
      const Field t = k == 0 ? rs.fp32[g] : gstate[index.state_names[k]];
      p.stored[k].push_back({rank, at, uint64_t(numel), ShardSet::slice(t, shard, start, numel, what)});
    }
    starts.emplace_back(uint64_t(start), it->second);
  }
  // Two parameters may not claim the same elements of one partition.
  std::sort(starts.begin(), starts.end());
  for (size_t k = 1; k < starts.size(); ++k) {
    const Param& prev = index.params[starts[k - 1].second];
    if (starts[k - 1].first + prev.stored[0].back().numel > starts[k].first)
      rs.maps[g].fail("fragments of '" + prev.name + "' and '" + index.params[starts[k].second].name + "' overlap");
  }
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
  for (int r = 0; r < index.dp; ++r) {
    OpenShard shard = r == 0 ? std::move(rank0) : shards.open(files.optim[size_t(r)]);
    const RankState rs = rank_state(shard, index, partitions);
    if (r == 0) read_rank0_layout(index, rs);
    for (size_t g = 0; g < size_t(index.num_groups); ++g) {
      check_group_state(index, rs, g);
      if (r == 0) index.steps.push_back(read_group_step(rs.state.at(int64_t(g)), shard.id));
      add_rank_pieces(index, rs, g, uint32_t(r), shard.id, by_name);
    }
  }
  check_complete(index, files);
}

}  // namespace zm::ds
