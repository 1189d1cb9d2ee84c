// DeepSpeed's model-state files, written side ([layouts §2.1] lists every key, in order): the
// source's pickle with 'module', param_shapes, the frozen parameters, dp_world_size and the
// parallel dimensions made for the target layout.
#include "zeromount/ds/model_file.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "zeromount/pt/build.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

namespace build = pt::build;
using build::add;
using build::Fill;
using build::ordered_dict;
using build::torch_size;
using pt::Kind;
using pt::Node;

namespace {

// Extents of elements [from, from + count) of a flat state made of `frags`, mapped.
std::vector<pt::Extent> elements(const ExtentMap& map, const std::vector<Fragment>& frags, uint64_t from,
                                 uint64_t count, uint64_t es) {
  std::vector<pt::Extent> out = element_extents(frags, from, count, es);
  for (auto& e : out) e = map(e);
  return out;
}

// Bytes [from, from + n) of a plain tensor's concatenated extents, mapped.
std::vector<pt::Extent> plain_bytes(const ExtentMap& map, const PlainTensor& p, uint64_t from, uint64_t n) {
  std::vector<pt::Extent> out;
  uint64_t at = 0;
  for (const pt::Extent& e : p.data) {
    const uint64_t lo = std::max(from, at), hi = std::min(from + n, at + e.length);
    if (lo < hi) out.push_back(map({e.file, e.offset + (lo - at), hi - lo}));
    at += e.length;
  }
  return out;
}

}  // namespace

std::shared_ptr<const ModelSkeleton> model_skeleton(const TagIndex& ix, const std::vector<PlainTensor>& frozen,
                                                    const Node* model_root) {
  auto sk = std::make_shared<ModelSkeleton>();
  const Node* module = model_root ? model_root->get("module") : nullptr;
  if (!module || module->kind != Kind::Dict) {
    sk->refusal = "it has no 'module' state dict to present";
  } else {
    // The names a module entry may have; each key is kept as a view of the index's own string.
    std::unordered_set<std::string_view> known;
    for (const Param& p : ix.params) known.insert(p.name);
    for (const PlainTensor& f : frozen) known.insert(f.name);
    for (const PlainTensor& b : ix.buffers) known.insert(b.name);
    for (const auto& [alias, canonical] : ix.shared) known.insert(alias);
    sk->module_keys.reserve(module->entries.size());
    for (const auto& [k, v] : module->entries) {
      auto it = k->kind == Kind::Str ? known.find(k->s) : known.end();
      if (it == known.end()) {
        sk->refusal = "module entry '" + (k->kind == Kind::Str ? k->s : pt::repr(k)) +
                      "' is none of the parameters, frozen parameters and buffers the index holds" +
                      (ix.parallel() ? " (frozen parameters and buffers of parallel sources are not indexed)" : "");
        break;
      }
      sk->module_keys.push_back(*it);
    }
  }
  if (!sk->refusal.empty()) sk->module_keys = {};
  pt::Copier copy(sk->arena);
  if (module) sk->module_metadata = module->state ? copy(module->state) : nullptr;
  // The values model_states_pickle remakes are not copied: 'module' and param_shapes hold one
  // entry per parameter.
  static const std::unordered_set<std::string_view> remade = {"module", "param_shapes", "frozen_param_shapes",
                                                              "frozen_param_fragments"};
  Node* root = build::dict(sk->arena);
  if (model_root)
    for (const auto& [k, v] : model_root->entries) {
      const bool skip = k->kind == Kind::Str && remade.count(k->s);
      root->entries.emplace_back(copy(k), skip ? build::none(sk->arena) : copy(v));
    }
  sk->root = root;
  return sk;
}

pt::DType lp_dtype(Precision p) {
  return p == Precision::Fp32 ? pt::DType::F32 : p == Precision::Bf16 ? pt::DType::BF16 : pt::DType::F16;
}

const Node* model_states_pickle(pt::Arena& a, const ModelSource& src, uint32_t rank) {
  const TagIndex& ix = src.index;
  const PartitionPlan& plan = src.plan;
  const TargetLayout& tg = plan.target;
  const bool zero3 = tg.stage == TargetStage::Zero3;
  const pt::DType lp = lp_dtype(tg.precision);
  const uint64_t W = tg.dp;

  // Module tensors by name: trainable ones view one lp storage per group (zero1/2, bf16opt), or
  // are empty (zero3); frozen ones are cast to lp; buffers are verbatim. The storage is the lp copy
  // of the masters, which sit in param order; with round robin the views are in flat order.
  std::unordered_map<std::string_view, const Node*> module_tensors;  // views of the index's names
  for (const FlatGroup& g : plan.groups) {
    pt::Tensor base;
    base.dtype = lp;
    base.shape = {int64_t(g.padded)};
    Fill fill{base};
    uint64_t at = 0;
    for (size_t j = 0; j < g.params.size(); ++j) {
      const Param& p = ix.params[g.params[j]];
      fill.zero((g.offsets[j] - at) * pt::element_size(lp));
      fill.values(elements(src.map, ix.fragments(p, 0), 0, p.numel, pt::element_size(ix.master_dtype)), ix.master_dtype,
                  p.numel);
      at = g.offsets[j] + p.numel;
    }
    fill.zero((g.padded - at) * pt::element_size(lp));
    const pt::Tensor* storage = a.make_tensor(std::move(base));
    for (size_t j = 0; j < g.flat.size(); ++j) {
      const Param& p = ix.params[g.flat[j]];
      pt::Tensor v;
      v.dtype = lp;
      v.shape = p.shape;
      v.made().storage_of = storage;
      v.storage_offset = int64_t(g.flat_offsets[j]);
      module_tensors[p.name] = a.make_tensor_node(std::move(v));
    }
  }
  auto empty = [&] {
    pt::Tensor t;
    t.dtype = lp;
    t.shape = {0};
    return a.make_tensor_node(std::move(t));
  };
  if (zero3)
    for (const Param& p : ix.params) module_tensors[p.name] = empty();
  Node* frozen_fragments = ordered_dict(a);
  Node* frozen_shapes = ordered_dict(a);
  for (const PlainTensor& f : src.frozen) {
    const uint64_t n = f.numel(), es = pt::element_size(f.dtype);
    add(frozen_shapes, a, f.name.c_str(), torch_size(a, f.shape));
    if (zero3) {
      module_tensors[f.name] = empty();
      const uint64_t part = zero3_partition(n, W), valid = valid_on_rank(n, part, rank);
      pt::Tensor t;
      t.dtype = lp;
      t.shape = {int64_t(part)};
      Fill fill{t};
      fill.values(plain_bytes(src.map, f, part * rank * es, valid * es), f.dtype, valid);
      fill.zero((part - valid) * pt::element_size(lp));
      add(frozen_fragments, a, f.name.c_str(), a.make_tensor_node(std::move(t)));
      continue;
    }
    pt::Tensor t;
    t.dtype = lp;
    t.shape = f.shape;
    Fill{t}.values(plain_bytes(src.map, f, 0, n * es), f.dtype, n);
    const Node* node = a.make_tensor_node(std::move(t));
    module_tensors[f.name] = node;
    add(frozen_fragments, a, f.name.c_str(), node);  // zero2 shares the module's storage
  }
  // Each ZeRO-3 rank keeps its own buffers: at the source's DP size rank r gets rank r's; at any
  // other, no target rank is a source rank, and every file gets rank 0's (as ZeRO-1/2 files do).
  const bool own_buffers = zero3 && W == uint64_t(ix.dp) && rank < ix.rank_buffers.size();
  for (const PlainTensor& b : own_buffers ? ix.rank_buffers[rank] : ix.buffers) {
    pt::Tensor t;
    t.dtype = b.dtype;
    t.shape = b.shape;
    Fill{t}.values(plain_bytes(src.map, b, 0, b.numel() * pt::element_size(b.dtype)), b.dtype, b.numel());
    module_tensors[b.name] = a.make_tensor_node(std::move(t));
  }
  for (const auto& [alias, canonical] : ix.shared)
    if (auto it = module_tensors.find(canonical); it != module_tensors.end()) module_tensors[alias] = it->second;

  const ModelSkeleton& skeleton = src.source;  // its module holds only the names above
  Node* module = ordered_dict(a);
  module->state = skeleton.module_metadata;
  module->entries.reserve(skeleton.module_keys.size());
  for (std::string_view name : skeleton.module_keys) {
    auto it = module_tensors.find(name);
    if (it == module_tensors.end())
      throw Error(ix.dir + ": module entry '" + std::string(name) +
                      "' is neither a parameter, a frozen parameter nor a buffer of the index",
                  EIO);
    module->entries.emplace_back(a.make_str(std::string(name)), it->second);
  }

  Node* shapes = build::list(a, {});
  auto shape_dict = [&](const std::vector<uint32_t>& params) {
    Node* d = ordered_dict(a);
    for (uint32_t k : params) add(d, a, ix.params[k].name.c_str(), torch_size(a, ix.params[k].shape));
    shapes->items.push_back(d);
  };
  for (const FlatGroup& g : plan.groups) shape_dict(g.flat);
  for (const SubGroup& s : plan.sub_groups) shape_dict(s.params);

  Node* parallel_dimensions = build::dict(a);
  add(parallel_dimensions, a, "pp_degree", a.make_int(1));
  add(parallel_dimensions, a, "tp_degree", a.make_int(1));
  const bool keeps_frozen = tg.stage == TargetStage::Zero2 || zero3;
  Node* root = build::dict(a);
  for (const auto& [k, v] : skeleton.root->entries) {
    const std::string_view key = k->kind == Kind::Str ? std::string_view(k->s) : std::string_view();
    const Node* out = v;
    if (key == "module")
      out = module;
    else if (key == "param_shapes")
      out = shapes;
    else if (key == "frozen_param_shapes")
      out = keeps_frozen ? frozen_shapes : build::none(a);
    else if (key == "frozen_param_fragments")
      out = keeps_frozen ? frozen_fragments : build::none(a);
    else if (key == "shared_params" && zero3 && rank != 0)
      out = build::dict(a);
    else if (key == "dp_world_size")
      out = a.make_int(int64_t(W));
    else if (key == "mp_world_size")
      out = a.make_int(1);
    else if (key == "checkpoint_parallel_dimensions")  // a parallel source is presented merged
      out = parallel_dimensions;
    root->entries.emplace_back(k, out);
  }
  return root;
}

}  // namespace zm::ds
