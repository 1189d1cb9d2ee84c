// AutoEP ZeRO-1/2 experts ([tp §8]; DeepSpeed's
// deepspeed/checkpoint/autoep_universal.py): the ds_autoep_layers metadata, which dp ranks hold
// which EP rank's experts, and the [E_total, ...] merge of each fused expert parameter.
#include <string>

#include "parallel.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"

namespace zm::ds {

namespace {

// DeepSpeedCheckpoint._lightweight_autoep_metadata keeps these, in this order, when present.
const char* const kLightFields[] = {"moe_layer_id", "module_path",       "expert_key_prefix",
                                    "num_experts",  "num_local_experts", "ep_size"};

// Python's tuple repr of a shape, for messages that read like DeepSpeed's: (2, 24, 16), (2,).
int64_t positive(const Field& entry, const char* key, const std::string& prefix) {
  const Field v = entry[key];
  if (!v.is(pt::Kind::Int) || v.node()->i < 1)
    throw FormatError(where(entry.file(), "AutoEP " + std::string(key) + " must be a positive integer, got " +
                                              pt::repr(v.node()) + " (" + prefix + ")."));
  return v.node()->i;
}

}  // namespace

std::optional<AutoEp> read_autoep(TagIndex& index, const Field& root) {
  auto layers = root.find("ds_autoep_layers");
  if (!layers || layers->is_none()) layers = root.find("autoep_layers");  // AUTOEP_LAYERS_KEY_LEGACY
  if (!layers || layers->is_none()) return std::nullopt;
  if (!layers->is(pt::Kind::List) || layers->size() == 0)
    throw FormatError(
        where(root.file(), "AutoEP metadata must be a non-empty list for ZeRO-1/2 universal conversion."));
  AutoEp ep;
  if (auto cfg = root.find("ds_config"); cfg && cfg->is(pt::Kind::Dict))
    if (auto order = cfg->find("use_data_before_expert_parallelism"); order) {
      if (!order->is(pt::Kind::Bool))
        throw FormatError(
            where(root.file(), "DeepSpeed checkpoint use_data_before_expert_parallelism must be a boolean."));
      ep.data_before_expert = order->node()->b;
    }
  pt::Arena& a = index.arena;
  pt::Node* light = a.make(pt::Kind::List);
  std::vector<const pt::Node*> keys;  // one str object per field: Python's constants, shared by every entry
  for (const char* f : kLightFields) keys.push_back(a.make_str(f));
  for (size_t k = 0; k < layers->size(); ++k) {
    const Field entry = (*layers)[k];
    if (!entry.is(pt::Kind::Dict))
      throw FormatError(where(root.file(), "AutoEP layer metadata must contain dictionaries."));
    std::vector<std::string> missing;
    for (const char* f : {"expert_key_prefix", "num_experts", "num_local_experts", "ep_size"})
      if (!entry.find(f)) missing.push_back(f);
    if (!missing.empty())
      throw FormatError(where(root.file(), "AutoEP layer metadata is missing fields: " + py_str_list(missing)));
    const Field prefix_f = entry["expert_key_prefix"];
    if (!prefix_f.is(pt::Kind::Str) || prefix_f.as_str().empty())
      throw FormatError(where(root.file(), "AutoEP expert_key_prefix must be a non-empty string."));
    const std::string prefix = prefix_f.as_str();
    AutoEpExpert x{positive(entry, "num_experts", prefix), positive(entry, "num_local_experts", prefix),
                   positive(entry, "ep_size", prefix)};
    if (x.num_experts != x.num_local * x.ep_size)
      throw FormatError(where(root.file(), "AutoEP expert count mismatch for " + prefix +
                                               ": num_experts=" + std::to_string(x.num_experts) +
                                               ", num_local_experts=" + std::to_string(x.num_local) +
                                               ", ep_size=" + std::to_string(x.ep_size) + "."));
    for (const char* w : {"w1", "w2", "w3"})
      if (!ep.experts.emplace(prefix + "." + w, x).second)
        throw FormatError(
            where(root.file(), "Duplicate AutoEP expert parameter metadata for " + prefix + "." + w + "."));
    index.ep = std::max(index.ep, int(x.ep_size));
    pt::Node* d = a.make(pt::Kind::Dict);
    for (size_t f = 0; f < std::size(kLightFields); ++f)
      if (auto v = entry.find(kLightFields[f])) d->entries.emplace_back(keys[f], a.copy(v->node()));
    light->items.push_back(d);
  }
  index.autoep_layers = light;
  return ep;
}

std::vector<int> autoep_dp_ranks(int e, int dp, int ep, bool data_before_expert) {
  if (dp % ep != 0)
    throw Error("RuntimeError: ZeRO DP degree " + std::to_string(dp) + " is not divisible by AutoEP size " +
                    std::to_string(ep) + ".",
                ENOTSUP);
  std::vector<int> out;
  const int edp = dp / ep;
  if (data_before_expert)
    for (int d = e * edp; d < (e + 1) * edp; ++d) out.push_back(d);
  else
    for (int d = e; d < dp; d += ep) out.push_back(d);
  return out;
}

void merge_autoep_expert(const TagIndex& index, Param& np, const Shape& local,
                         const std::vector<std::vector<Fragment>>& stored, const AutoEpExpert& x,
                         bool data_before_expert) {
  const std::string& dir = index.dir;
  if (local.empty() || local[0] != x.num_local)
    throw FormatError(where(dir, "AutoEP local shape mismatch for " + np.name +
                                     ": shape=" + pt::shape_tuple_text(local) +
                                     ", num_local_experts=" + std::to_string(x.num_local) + "."));
  const uint64_t want = pt::numel(local);
  for (int e = 0; e < int(x.ep_size); ++e) {
    TpSlice slice;
    slice.shape = local;
    const std::vector<int> ranks = autoep_dp_ranks(e, index.dp, int(x.ep_size), data_before_expert);
    for (size_t k = 0; k < stored.size(); ++k) {
      std::vector<Fragment> frags;
      uint64_t at = 0;
      for (int d : ranks)  // a dp rank without a fragment is skipped, as the converter skips missing files
        for (Fragment f : stored[k])
          if (f.rank == uint32_t(d)) {
            f.start = at;
            at += f.numel;
            frags.push_back(f);
          }
      const std::string state = index.state_names.at(k);
      if (frags.empty())
        throw FormatError(where(dir, "RuntimeError: Missing AutoEP " + state + " fragments for " + np.name +
                                         ", EP rank " + std::to_string(e) + "."));
      if (at != want)
        throw FormatError(where(dir, "RuntimeError: AutoEP " + state + " fragment size mismatch for " + np.name +
                                         ", EP rank " + std::to_string(e) + ": got " + std::to_string(at) +
                                         ", expected " + std::to_string(want) + "."));
      slice.stored.push_back(std::move(frags));
    }
    np.slices.push_back(std::move(slice));
  }
  np.rule = TpRule::Expert;
  np.cat_dim = 0;
  np.shape = local;
  np.shape[0] = local[0] * x.ep_size;
  if (np.shape[0] != x.num_experts)
    throw FormatError(where(dir, "RuntimeError: AutoEP consolidated expert count mismatch for " + np.name + ": got " +
                                     std::to_string(np.shape[0]) + ", expected " + std::to_string(x.num_experts) +
                                     "."));
  np.numel = np.merged_numel = want * uint64_t(x.ep_size);
  np.ep_num_experts = x.num_experts;
}

}  // namespace zm::ds
