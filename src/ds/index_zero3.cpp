// ZeRO-3 (spec §3.2.3, §4.2): every parameter is split into W partitions of ceil(n/W) elements;
// a rank's fp32_flat_groups[s] and Adam moments concatenate its partitions of sub-group s.
#include <algorithm>
#include <optional>

#include "builders.h"
#include "model_states.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

namespace {

using FrozenShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

const pt::Node* copy_meta(pt::Arena& arena, const Field& osd) {
  pt::Node* meta = arena.make(pt::Kind::Dict);
  for (const auto& [k, v] : osd.node()->entries)
    if (k->kind == pt::Kind::Str && k->s != "optimizer_state_dict" && k->s != "fp32_flat_groups")
      meta->entries.emplace_back(arena.make_str(k->s), arena.copy(v));
  return meta;
}

// Rank 0's param_groups list sub-group ids in 'params': each sub-group belongs to exactly one.
std::vector<int> group_of_subgroups(const Field& groups, size_t S) {
  std::vector<int> group_of(S, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    const Field ids = groups[g]["params"];
    for (size_t k = 0; k < ids.size(); ++k) {
      const int64_t id = ids[k].as_int();
      if (id < 0 || size_t(id) >= S || group_of[size_t(id)] != -1)
        ids[k].fail("sub-group id " + std::to_string(id) + " is out of range or repeated (param_shapes has " +
                    std::to_string(S) + ")");
      group_of[size_t(id)] = int(g);
    }
  }
  for (size_t s = 0; s < S; ++s)
    if (group_of[s] < 0) groups.fail("no param group lists sub-group " + std::to_string(s));
  return group_of;
}

// Each parameter's partition starts where the previous one's ended, restarting per sub-group.
// Returns, per sub-group, the elements its flat tensors must hold.
std::vector<uint64_t> place_partitions(TagIndex& index) {
  std::vector<uint64_t> sizes(index.sub_groups, 0);
  for (auto& p : index.params) {
    uint64_t& q = sizes[size_t(p.sub_group)];
    p.offset = q;
    q += zero3_partition(p.numel, uint64_t(index.dp));
  }
  return sizes;
}

std::string members_of(const TagIndex& index, size_t s) {
  std::string m;
  for (const auto& p : index.params)
    if (p.sub_group == int(s)) m += (m.empty() ? "" : ", ") + p.name;
  return m;
}

// The sub-group's partitions must fill its flat tensors exactly; otherwise param_shapes and the
// optimizer files disagree (a changed shape, or the wrong files), and no slice is trusted.
void check_subgroup_tensor(const TagIndex& index, const Field& t, size_t s, uint64_t need, const std::string& model) {
  require_dtype(t, index.master_dtype, "the master weights");
  if (t.as_tensor().numel() != need)
    t.fail("holds " + std::to_string(t.as_tensor().numel()) + " elements, but the partitions of sub-group " +
           std::to_string(s) + " (" + members_of(index, s) + ") in param_shapes of " + model + " need " +
           std::to_string(need));
}

// Element 0 of every state of every sub-group of one rank, in TagIndex::flat_offsets order.
void read_rank_layout(TagIndex& index, const OpenShard& shard, int r, const std::vector<uint64_t>& need,
                      const std::string& model) {
  const Field osd = shard.root()["optimizer_state_dict"];
  const Field flat = osd["fp32_flat_groups"];
  const Field state = osd["optimizer_state_dict"]["state"];
  const size_t S = index.sub_groups;
  if (flat.size() != S)
    flat.fail("has " + std::to_string(flat.size()) + " sub-groups, param_shapes has " + std::to_string(S));
  if (state.size() != 0 && state.size() != S)  // {} before the first step
    state.fail("holds the state of " + std::to_string(state.size()) + " sub-groups, not of all " + std::to_string(S));
  if (r == 0) index.master_dtype = flat[0].as_tensor().dtype;
  for (size_t s = 0; s < S; ++s) {
    std::optional<Field> st;
    if (state.size() != 0) st = state.at(int64_t(s));
    const Field* group = st && st->size() ? &*st : nullptr;
    const uint64_t partition = flat[s].as_tensor().numel();
    const StateKeys keys = split_state(group, partition);
    if (r == 0 && s == 0) adopt_state_keys(index, {keys}, state);
    // Every sub-group keeps rank 0's first one's keys (ZeRO-3 refuses Muon: one optimizer rule).
    const StateKeys want{{index.state_names.begin() + 1, index.state_names.end()}, {}, index.scalar_names};
    check_state_keys(index, want, keys, group, group ? *group : state, partition);
    if (r == 0) index.scalars.push_back(read_scalars(index, group, shard.id));
    for (size_t k = 0; k < index.state_names.size(); ++k) {
      const Field t = k == 0 ? flat[s] : (*group)[index.state_names[k]];
      check_subgroup_tensor(index, t, s, need[s], model);
      index.flat_offsets.push_back(
          ShardSet::slice(t, shard.id, 0, t.as_tensor().numel(), "sub-group " + std::to_string(s)).offset);
    }
  }
  index.optim_shard.push_back(shard.id);
}

// What rank r's model file must give, as values of `model` (rank 0's file): each frozen
// parameter's fragment, then each buffer. A rank whose pickle is rank 0's byte for byte is read
// as rank 0's values when it keeps these tensors at the same bytes, not decoded again: DP x params
// decoded tensors (6.4 M at 100,000 parameters and DP 64) would cost minutes.
std::vector<const pt::Tensor*> rank_tensors(const TagIndex& index, const OpenShard& model, bool frozen) {
  std::vector<const pt::Tensor*> out;
  if (frozen) {
    const Field frags = model.root()["frozen_param_fragments"];
    for (const auto& f : index.frozen) out.push_back(&frags[f.name].as_tensor());
  }
  if (!index.buffers.empty()) {
    const Field module = model.root()["module"];
    for (const PlainTensor& b : index.buffers) out.push_back(&module[b.name].as_tensor());
  }
  return out;
}

// Each rank's model file: its ceil(n/W) partition of every frozen parameter (with padding), and
// its own buffers, of rank 0's names, dtypes and shapes.
void read_rank_model_files(TagIndex& index, ShardSet& shards, const TagFiles& files, const FrozenShapes& frozen,
                           const OpenShard& model0) {
  if (frozen.empty() && index.buffers.empty()) return;
  for (auto& [name, shape] : frozen) index.frozen.push_back(PlainTensor{name, pt::DType::F32, shape, {}});
  const std::vector<const pt::Tensor*> used = rank_tensors(index, model0, !frozen.empty());
  for (int r = 0; r < index.dp; ++r) {
    std::optional<OpenShard> own;
    if (r > 0) own = shards.open_like(files.model[size_t(r)], model0, used);
    if (r > 0 && !own) own = shards.open(files.model[size_t(r)]);
    const OpenShard& model = r > 0 ? *own : model0;
    if (!frozen.empty()) {
      const Field frags = model.root()["frozen_param_fragments"];
      for (auto& f : index.frozen) {
        const Field t = frags[f.name];
        const uint64_t n = pt::numel(f.shape), part = zero3_partition(n, uint64_t(index.dp));
        f.dtype = t.as_tensor().dtype;
        if (const uint64_t valid = valid_on_rank(n, part, r))
          f.data.push_back(ShardSet::slice(t, model.id, 0, valid, "frozen parameter " + f.name));
      }
    }
    if (index.buffers.empty()) continue;
    const Field module = model.root()["module"];
    auto& mine = index.rank_buffers.emplace_back();
    // Rank 0's buffers, and those of a rank read as rank 0's tree (open_like), are rank 0's by
    // shape and dtype; a rank decoded on its own is checked.
    const bool own_tree = r > 0 && !model.pt->like;
    for (const PlainTensor& b : index.buffers) {
      const Field t = module[b.name];
      if (own_tree) {
        if (t.as_tensor().shape != b.shape) t.fail("buffer shape differs from rank 0's");
        require_dtype(t, b.dtype, "rank 0's buffer " + b.name);
      }
      mine.push_back(
          PlainTensor{b.name, b.dtype, b.shape, {ShardSet::slice(t, model.id, 0, b.numel(), "buffer " + b.name)}});
    }
  }
}

}  // namespace

void index_zero3(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0) {
  index.optimizer = OptimizerClass::DeepSpeedZeroOptimizer_Stage3;
  OpenShard model = shards.open(files.model[0]);
  read_model_common(index, model);
  const std::vector<ShapeList> subgroups = read_param_shapes(model.root());
  FrozenShapes frozen;
  if (auto fshapes = model.root().find("frozen_param_shapes"); fshapes && !fshapes->is_none())
    for (const auto& [name, shape] : fshapes->items()) frozen.emplace_back(name, shape.as_shape());

  const Field osd0 = rank0.root()["optimizer_state_dict"];
  if (osd0["partition_count"].as_int() != index.dp)
    osd0["partition_count"].fail("says " + std::to_string(osd0["partition_count"].as_int()) +
                                 " partitions, the tag has " + std::to_string(index.dp) + " optimizer files");
  const Field inner0 = osd0["optimizer_state_dict"];
  const Field groups = inner0["param_groups"];
  index.sub_groups = subgroups.size();
  const std::vector<int> group_of = group_of_subgroups(groups, index.sub_groups);
  index.num_groups = int(groups.size());
  for (size_t s = 0; s < subgroups.size(); ++s)
    for (const auto& [name, shape] : subgroups[s])
      index.params.push_back(Param{name, shape, pt::numel(shape), group_of[s], int(s), int(s), 0, {}});
  if (index.params.empty()) throw FormatError(where(files.model[0], "param_shapes lists no trainable parameters"));
  index.optim_meta = copy_meta(index.arena, osd0);
  index.param_groups = index.arena.copy(groups.node());
  index.loss_scaler = read_loss_scaler(osd0);

  const std::vector<uint64_t> need = place_partitions(index);
  for (int r = 0; r < index.dp; ++r) {
    OpenShard shard = r == 0 ? std::move(rank0) : shards.open(files.optim[size_t(r)]);
    read_rank_layout(index, shard, r, need, files.model[0]);
  }
  read_module(index, model, false);  // after the master dtype is known
  read_rank_model_files(index, shards, files, frozen, model);
}

}  // namespace zm::ds
