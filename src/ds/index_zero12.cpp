// ZeRO-1/2 and BF16_Optimizer (spec §3.2.1, §3.2.2, §4.1): each rank's param_slice_mappings
// says where each parameter's piece starts in that rank's flat fp32 partition and Adam moments.
#include <algorithm>
#include <unordered_map>

#include "builders.h"
#include "model_states.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

namespace {

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

}  // namespace

void index_zero12(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0) {
  {
    OpenShard model = shards.open(files.model[0]);
    read_model_common(index, model);
    const Field root = model.root();
    std::unordered_map<std::string, size_t> by_name;
    const auto groups = read_param_shapes(root);
    index.num_groups = int(groups.size());
    for (size_t g = 0; g < groups.size(); ++g)
      for (const auto& [name, shape] : groups[g]) {
        if (!by_name.emplace(name, index.params.size()).second)
          root["param_shapes"].fail("parameter '" + name + "' appears twice");
        index.params.push_back(Param{name, shape, numel_of(shape), int(g), -1, int(g), {}});
      }
    // Stage 2 saves each frozen parameter whole; stage 1 saves none (zero_to_fp32 drops them too).
    auto fshapes = root.find("frozen_param_shapes");
    if (fshapes && !fshapes->is_none()) {
      const Field frags = root["frozen_param_fragments"];
      for (const auto& [name, shape] : fshapes->items()) {
        const Field t = frags[name];
        PlainTensor f{name, t.as_tensor().dtype, shape.as_shape(), {}};
        f.data.push_back(ShardSet::slice(t, model.id, 0, numel_of(f.shape), "frozen parameter " + name));
        index.frozen.push_back(std::move(f));
      }
    }
  }
  if (index.params.empty()) throw FormatError(where(files.model[0], "param_shapes lists no trainable parameters"));
  std::unordered_map<std::string, size_t> by_name;
  for (size_t k = 0; k < index.params.size(); ++k) by_name.emplace(index.params[k].name, k);

  const size_t G = size_t(index.num_groups);
  for (int r = 0; r < index.dp; ++r) {
    OpenShard shard = r == 0 ? std::move(rank0) : shards.open(files.optim[size_t(r)]);
    const Field osd = shard.root()["optimizer_state_dict"];
    const Field base = osd["base_optimizer_state"];
    if (!base.is(pt::Kind::Dict))
      base.fail("elastic (list) optimizer state is not supported; save with elastic_checkpoint=false");
    const Field state = base["state"];
    const Field fp32 = osd["single_partition_of_fp32_groups"];
    const Field maps = osd["param_slice_mappings"];
    if (fp32.size() != G || maps.size() != G || state.size() != G)
      osd.fail("has " + std::to_string(maps.size()) + " param groups, param_shapes in the model file has " +
               std::to_string(G));
    if (auto pc = osd.find("partition_count"); pc && pc->is(pt::Kind::List))
      for (size_t g = 0; g < pc->size(); ++g)
        if ((*pc)[g].as_int() != index.dp)
          (*pc)[g].fail("partition_count " + std::to_string((*pc)[g].as_int()) + " differs from the " +
                        std::to_string(index.dp) + " dp ranks found");
    if (r == 0) {
      const Field st0 = state.at(0);
      index.state_names = {"fp32"};
      for (auto& k : state_keys(st0)) index.state_names.push_back(k);
      index.master_dtype = fp32[0].as_tensor().dtype;
      for (auto& p : index.params) p.stored.resize(index.state_names.size());
      index.optim_meta = copy_meta(index.arena, osd, index.dp, G);
      index.param_groups = index.arena.copy(base["param_groups"].node());
    }
    for (size_t g = 0; g < G; ++g) {
      const Field gstate = state.at(int64_t(g));
      const auto keys = state_keys(gstate);
      if (!std::equal(keys.begin(), keys.end(), index.state_names.begin() + 1, index.state_names.end()) ||
          keys.size() + 1 != index.state_names.size())
        gstate.fail("optimizer state keys differ from rank 0's");
      if (r == 0) index.steps.push_back(gstate.find("step") ? read_step(gstate["step"], shard.id) : StepValue{});
      std::vector<std::pair<uint64_t, std::string>> starts;
      for (const auto& [name, fa] : maps[g].items()) {
        auto it = by_name.find(name);
        if (it == by_name.end()) fa.fail("parameter is not in param_shapes of " + files.model[0]);
        Param& p = index.params[it->second];
        if (p.group != int(g)) fa.fail("parameter belongs to param group " + std::to_string(p.group));
        const int64_t start = fa.attr("start").as_int(), numel = fa.attr("numel").as_int();
        if (start < 0 || numel < 0) fa.fail("negative fragment address");
        uint64_t at = 0;
        for (const auto& f : p.stored[0]) at += f.numel;
        const std::string what = "parameter " + name;
        p.stored[0].push_back(
            {uint32_t(r), at, uint64_t(numel), ShardSet::slice(fp32[g], shard.id, start, numel, what)});
        for (size_t k = 1; k < index.state_names.size(); ++k) {
          const Field st = gstate[index.state_names[k]];
          if (st.as_tensor().dtype != index.master_dtype)
            st.fail("is " + std::string(pt::dtype_name(st.as_tensor().dtype)) + " while the master weights are " +
                    std::string(pt::dtype_name(index.master_dtype)) + "; mixed state dtypes are not supported yet");
          p.stored[k].push_back(
              {uint32_t(r), at, uint64_t(numel), ShardSet::slice(st, shard.id, start, numel, what)});
        }
        starts.emplace_back(uint64_t(start), name);
      }
      // Two parameters may not claim the same elements of one partition.
      std::sort(starts.begin(), starts.end());
      for (size_t k = 1; k < starts.size(); ++k) {
        const Param& prev = index.params[by_name[starts[k - 1].second]];
        if (starts[k - 1].first + prev.stored[0].back().numel > starts[k].first)
          maps[g].fail("fragments of '" + starts[k - 1].second + "' and '" + starts[k].second + "' overlap");
      }
    }
  }
  for (const auto& p : index.params) {
    uint64_t have = 0;
    for (const auto& f : p.stored[0]) have += f.numel;
    if (have != p.numel)
      throw FormatError(where(index.dir, "parameter '" + p.name + "': the optimizer files hold " +
                                             std::to_string(have) + " elements, its shape in " + files.model[0] +
                                             " needs " + std::to_string(p.numel)));
  }
}

}  // namespace zm::ds
