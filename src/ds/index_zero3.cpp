// ZeRO-3 (spec §3.2.3, §4.2): every parameter is split into W partitions of ceil(n/W) elements;
// a rank's fp32_flat_groups[s] and Adam moments concatenate its partitions of sub-group s.
#include <algorithm>

#include "builders.h"
#include "model_states.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

namespace {

const pt::Node* copy_meta(pt::Arena& arena, const Field& osd) {
  pt::Node* meta = arena.make(pt::Kind::Dict);
  for (const auto& [k, v] : osd.node()->entries)
    if (k->kind == pt::Kind::Str && k->s != "optimizer_state_dict" && k->s != "fp32_flat_groups")
      meta->entries.emplace_back(arena.make_str(k->s), arena.copy(v));
  return meta;
}

}  // namespace

void index_zero3(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0) {
  const int W = index.dp;
  std::vector<ShapeList> subgroups;
  std::vector<std::pair<std::string, std::vector<int64_t>>> frozen;
  {
    OpenShard model = shards.open(files.model[0]);
    read_model_common(index, model);
    subgroups = read_param_shapes(model.root());
    auto fshapes = model.root().find("frozen_param_shapes");
    if (fshapes && !fshapes->is_none())
      for (const auto& [name, shape] : fshapes->items()) frozen.emplace_back(name, shape.as_shape());
  }
  const size_t S = subgroups.size();
  const Field osd0 = rank0.root()["optimizer_state_dict"];
  if (osd0["partition_count"].as_int() != W)
    osd0["partition_count"].fail("says " + std::to_string(osd0["partition_count"].as_int()) +
                                 " partitions, the tag has " + std::to_string(W) + " optimizer files");
  const Field inner0 = osd0["optimizer_state_dict"];
  const Field groups = inner0["param_groups"];
  std::vector<int> group_of(S, -1);
  index.num_groups = int(groups.size());
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
  index.state_names = {"fp32"};
  for (auto& k : state_keys(inner0["state"].at(0))) index.state_names.push_back(k);
  for (size_t s = 0; s < S; ++s)
    for (const auto& [name, shape] : subgroups[s])
      index.params.push_back(Param{name, shape, numel_of(shape), group_of[s], int(s), int(s), 0, {}});
  if (index.params.empty()) throw FormatError(where(files.model[0], "param_shapes lists no trainable parameters"));
  index.sub_groups = S;
  index.optim_meta = copy_meta(index.arena, osd0);
  index.param_groups = index.arena.copy(groups.node());

  for (int r = 0; r < W; ++r) {
    OpenShard shard = r == 0 ? std::move(rank0) : shards.open(files.optim[size_t(r)]);
    const Field osd = shard.root()["optimizer_state_dict"];
    const Field flat = osd["fp32_flat_groups"];
    const Field state = osd["optimizer_state_dict"]["state"];
    if (flat.size() != S)
      flat.fail("has " + std::to_string(flat.size()) + " sub-groups, param_shapes has " + std::to_string(S));
    if (r == 0) index.master_dtype = flat[0].as_tensor().dtype;
    size_t p_index = 0;
    for (size_t s = 0; s < S; ++s) {
      const Field st = state.at(int64_t(s));
      if (r == 0) index.steps.push_back(st.find("step") ? read_step(st["step"], shard.id) : StepValue{});
      std::vector<Field> tensors{flat[s]};
      for (size_t k = 1; k < index.state_names.size(); ++k) tensors.push_back(st[index.state_names[k]]);
      // The sub-group's partitions must fill its flat tensors exactly; otherwise param_shapes and
      // the optimizer files disagree (a changed shape, or the wrong files), and no slice is trusted.
      uint64_t need = 0;
      std::string members;
      for (size_t j = 0; j < subgroups[s].size(); ++j) {
        const Param& p = index.params[p_index + j];
        need += (p.numel + uint64_t(W) - 1) / uint64_t(W);
        members += (j ? ", " : "") + p.name;
      }
      for (const Field& t : tensors) {
        if (t.as_tensor().dtype != index.master_dtype)
          t.fail("is " + std::string(pt::dtype_name(t.as_tensor().dtype)) + " while the master weights are " +
                 std::string(pt::dtype_name(index.master_dtype)) + "; mixed state dtypes are not supported yet");
        if (t.as_tensor().numel() != need)
          t.fail("holds " + std::to_string(t.as_tensor().numel()) + " elements, but the partitions of sub-group " +
                 std::to_string(s) + " (" + members + ") in param_shapes of " + files.model[0] + " need " +
                 std::to_string(need));
      }
      // Each parameter's partition starts where the previous one ended, restarting per sub-group.
      uint64_t q = 0;
      for (size_t j = 0; j < subgroups[s].size(); ++j, ++p_index) {
        Param& p = index.params[p_index];
        if (r == 0) p.offset = q;
        q += (p.numel + uint64_t(W) - 1) / uint64_t(W);
      }
      for (const Field& t : tensors)
        index.flat_offsets.push_back(
            ShardSet::slice(t, shard.id, 0, t.as_tensor().numel(), "sub-group " + std::to_string(s)).offset);
    }
    index.optim_shard.push_back(shard.id);
  }
  // Frozen parameters: each rank's model file holds its ceil(n/W) partition (with padding).
  if (!frozen.empty()) {
    for (auto& [name, shape] : frozen) index.frozen.push_back(PlainTensor{name, pt::DType::F32, shape, {}});
    for (int r = 0; r < W; ++r) {
      OpenShard model = shards.open(files.model[size_t(r)]);
      const Field frags = model.root()["frozen_param_fragments"];
      for (auto& f : index.frozen) {
        const Field t = frags[f.name];
        const uint64_t n = numel_of(f.shape), part = zero3_partition(n, uint64_t(W));
        f.dtype = t.as_tensor().dtype;
        if (const uint64_t valid = valid_on_rank(n, part, r))
          f.data.push_back(ShardSet::slice(t, model.id, 0, valid, "frozen parameter " + f.name));
      }
    }
  }
}

}  // namespace zm::ds
