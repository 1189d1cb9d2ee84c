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

namespace {

// One rank's model-state pickle at the target, made in named steps: the module's tensors by name
// (the trainable ones, the frozen ones, the buffers, then the shared aliases), the module in the
// source's key order, param_shapes, and the source's root with the keys DeepSpeed writes per
// layout replaced.
class ModelStatesFile {
 public:
  ModelStatesFile(pt::Arena& a, const ModelSource& src, uint32_t rank)
      : a_(a),
        src_(src),
        ix_(src.index),
        plan_(src.plan),
        rank_(rank),
        zero3_(src.plan.target.stage == TargetStage::Zero3),
        lp_(lp_dtype(src.plan.target.precision)),
        frozen_fragments_(ordered_dict(a)),
        frozen_shapes_(ordered_dict(a)) {}

  const Node* root() {
    trainable();
    frozen();
    buffers();
    for (const auto& [alias, canonical] : ix_.shared)
      if (auto it = tensors_.find(canonical); it != tensors_.end()) tensors_[alias] = it->second;
    return replaced_root(module(), param_shapes());
  }

 private:
  // Trainable tensors: views of one lp storage per flat group (zero1/2, bf16opt), the lp copy of
  // the masters in param order (with round robin the views are in flat order); empty at ZeRO-3.
  void trainable() {
    if (zero3_) {
      for (const Param& p : ix_.params) tensors_[p.name] = empty();
      return;
    }
    for (const FlatGroup& g : plan_.groups) {
      pt::Tensor base;
      base.dtype = lp_;
      base.shape = {int64_t(g.padded)};
      Fill fill{base};
      uint64_t at = 0;
      for (size_t j = 0; j < g.params.size(); ++j) {
        const Param& p = ix_.params[g.params[j]];
        fill.zero((g.offsets[j] - at) * pt::element_size(lp_));
        fill.values(elements(src_.map, ix_.fragments(p, 0), 0, p.numel, pt::element_size(ix_.master_dtype)),
                    ix_.master_dtype, p.numel);
        at = g.offsets[j] + p.numel;
      }
      fill.zero((g.padded - at) * pt::element_size(lp_));
      const pt::Tensor* storage = a_.make_tensor(std::move(base));
      for (size_t j = 0; j < g.flat.size(); ++j) {
        const Param& p = ix_.params[g.flat[j]];
        pt::Tensor v;
        v.dtype = lp_;
        v.shape = p.shape;
        v.made().storage_of = storage;
        v.storage_offset = int64_t(g.flat_offsets[j]);
        tensors_[p.name] = a_.make_tensor_node(std::move(v));
      }
    }
  }

  // Frozen parameters, cast to lp: whole in the module (ZeRO-2 shares that storage with
  // frozen_param_fragments), or at ZeRO-3 empty there and this rank's partition in the fragments.
  void frozen() {
    const uint64_t W = plan_.target.dp;
    for (const PlainTensor& f : src_.frozen) {
      const uint64_t n = f.numel(), es = pt::element_size(f.dtype);
      add(frozen_shapes_, a_, f.name.c_str(), torch_size(a_, f.shape));
      pt::Tensor t;
      t.dtype = lp_;
      if (zero3_) {
        tensors_[f.name] = empty();
        const uint64_t part = zero3_partition(n, W), valid = valid_on_rank(n, part, rank_);
        t.shape = {int64_t(part)};
        Fill fill{t};
        fill.values(plain_bytes(src_.map, f, part * rank_ * es, valid * es), f.dtype, valid);
        fill.zero((part - valid) * pt::element_size(lp_));
        add(frozen_fragments_, a_, f.name.c_str(), a_.make_tensor_node(std::move(t)));
        continue;
      }
      t.shape = f.shape;
      Fill{t}.values(plain_bytes(src_.map, f, 0, n * es), f.dtype, n);
      const Node* node = a_.make_tensor_node(std::move(t));
      tensors_[f.name] = node;
      add(frozen_fragments_, a_, f.name.c_str(), node);
    }
  }

  // Buffers, verbatim. Each ZeRO-3 rank keeps its own: at the source's DP size rank r gets rank
  // r's; at any other, no target rank is a source rank, and every file gets rank 0's (as ZeRO-1/2
  // files do).
  void buffers() {
    const bool own = zero3_ && plan_.target.dp == uint64_t(ix_.dp) && rank_ < ix_.rank_buffers.size();
    for (const PlainTensor& b : own ? ix_.rank_buffers[rank_] : ix_.buffers) {
      pt::Tensor t;
      t.dtype = b.dtype;
      t.shape = b.shape;
      Fill{t}.values(plain_bytes(src_.map, b, 0, b.numel() * pt::element_size(b.dtype)), b.dtype, b.numel());
      tensors_[b.name] = a_.make_tensor_node(std::move(t));
    }
  }

  // 'module': the skeleton's keys in order (it holds only the names above), its _metadata kept.
  Node* module() const {
    const ModelSkeleton& skeleton = src_.source;
    Node* module = ordered_dict(a_);
    module->state = skeleton.module_metadata;
    module->entries.reserve(skeleton.module_keys.size());
    for (std::string_view name : skeleton.module_keys) {
      auto it = tensors_.find(name);
      if (it == tensors_.end())
        throw Error(ix_.dir + ": module entry '" + std::string(name) +
                        "' is neither a parameter, a frozen parameter nor a buffer of the index",
                    EIO);
      module->entries.emplace_back(a_.make_str(std::string(name)), it->second);
    }
    return module;
  }

  // param_shapes: one ordered dict per flat group (in flat order) or ZeRO-3 sub-group.
  Node* param_shapes() const {
    Node* shapes = build::list(a_, {});
    auto shape_dict = [&](const std::vector<uint32_t>& params) {
      Node* d = ordered_dict(a_);
      for (uint32_t k : params) add(d, a_, ix_.params[k].name.c_str(), torch_size(a_, ix_.params[k].shape));
      shapes->items.push_back(d);
    };
    for (const FlatGroup& g : plan_.groups) shape_dict(g.flat);
    for (const SubGroup& s : plan_.sub_groups) shape_dict(s.params);
    return shapes;
  }

  // The source's root in its key order, each key DeepSpeed writes per layout made for the target.
  Node* replaced_root(const Node* module, const Node* shapes) const {
    Node* parallel_dimensions = build::dict(a_);  // a parallel source is presented merged
    add(parallel_dimensions, a_, "pp_degree", a_.make_int(1));
    add(parallel_dimensions, a_, "tp_degree", a_.make_int(1));
    const bool keeps_frozen = plan_.target.stage == TargetStage::Zero2 || zero3_;
    Node* root = build::dict(a_);
    for (const auto& [k, v] : src_.source.root->entries) {
      const std::string_view key = k->kind == Kind::Str ? std::string_view(k->s) : std::string_view();
      const Node* out = v;
      if (key == "module")
        out = module;
      else if (key == "param_shapes")
        out = shapes;
      else if (key == "frozen_param_shapes")
        out = keeps_frozen ? frozen_shapes_ : build::none(a_);
      else if (key == "frozen_param_fragments")
        out = keeps_frozen ? frozen_fragments_ : build::none(a_);
      else if (key == "shared_params" && zero3_ && rank_ != 0)
        out = build::dict(a_);
      else if (key == "dp_world_size")
        out = a_.make_int(int64_t(plan_.target.dp));
      else if (key == "mp_world_size")
        out = a_.make_int(1);
      else if (key == "checkpoint_parallel_dimensions")
        out = parallel_dimensions;
      root->entries.emplace_back(k, out);
    }
    return root;
  }

  const Node* empty() const {
    pt::Tensor t;
    t.dtype = lp_;
    t.shape = {0};
    return a_.make_tensor_node(std::move(t));
  }

  pt::Arena& a_;
  const ModelSource& src_;
  const TagIndex& ix_;
  const PartitionPlan& plan_;
  const uint32_t rank_;
  const bool zero3_;
  const pt::DType lp_;
  std::unordered_map<std::string_view, const Node*> tensors_;  // views of the index's names
  Node* frozen_fragments_;
  Node* frozen_shapes_;
};

}  // namespace

const Node* model_states_pickle(pt::Arena& a, const ModelSource& src, uint32_t rank) {
  return ModelStatesFile(a, src, rank).root();
}

}  // namespace zm::ds
