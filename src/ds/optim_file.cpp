#include "zeromount/ds/optim_file.h"

#include "zeromount/ds/model_root.h"
#include "zeromount/ds/precision.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

namespace build = pt::build;
using pt::Kind;
using pt::Node;

namespace {

// deepspeed.runtime.zero.config.ZeroStageEnum(stage), as optimizer-state files hold it.
const Node* zero_stage_enum(pt::Arena& a, int stage) {
  Node* n = a.make(Kind::Object);
  n->callee = a.make_global("deepspeed.runtime.zero.config", "ZeroStageEnum");
  n->args = build::tuple(a, {a.make_int(stage)});
  return n;
}

// The scaler a target engine restores [layouts §4.1]: an fp16 target keeps an fp16 source's own
// scaler, else starts as DeepSpeed starts one; fp32 and bf16 have a static scale of 1.
struct Scaler {
  const Node* node;
  bool dynamic;
};

class OptimFile {
 public:
  OptimFile(pt::Arena& a, const OptimSource& src, uint32_t rank)
      : a_(a), src_(src), ix_(src.index), plan_(src.plan), rank_(rank), es_(pt::element_size(ix_.master_dtype)) {}

  const Node* pickle() {
    const Node* config = src_.model_root->get("ds_config");
    Node* root = build::dict(a_);
    build::add(root, a_, "optimizer_state_dict", plan_.target.stage == TargetStage::Zero3 ? zero3() : zero12(config));
    build::add(root, a_, "ds_config", config ? config : build::none(a_));
    const Node* version = src_.model_root->get("ds_version");
    build::add(root, a_, "ds_version", version ? version : a_.make_str(ix_.ds_version));
    return root;
  }

 private:
  const Node* meta(const char* key) const { return ix_.optim_meta ? ix_.optim_meta->get(key) : nullptr; }

  // A flat state tensor of `numel` master-dtype elements: the pieces' elements at their starts,
  // zeros elsewhere (padding is zero, as gradients are in real runs).
  pt::Tensor flat(const std::vector<FragmentAddress>& pieces, size_t state, uint64_t numel) const {
    pt::Tensor t;
    t.dtype = ix_.master_dtype;
    t.shape = {int64_t(numel)};
    build::Fill fill{t};
    uint64_t at = 0;
    for (const FragmentAddress& f : pieces) {
      fill.zero((f.start - at) * es_);
      // Only the source pieces that overlap this rank's range: a ZeRO-3 source has one per source rank.
      const auto frags = ix_.fragments(ix_.params[f.param], state, f.param_start, f.numel);
      for (const auto& e : element_extents(frags, f.param_start, f.numel, es_)) fill.bytes(src_.map(e));
      at = f.start + f.numel;
    }
    fill.zero((numel - at) * es_);
    return t;
  }

  // Muon's momentum_buffer of one group on this rank: the whole buffer of each parameter the
  // partition touches, back to back in partition order (stage_1_and_2.py, get_flat_partition);
  // nullptr when the partition touches none (DeepSpeed then makes no buffer, and torch saves no state).
  const Node* whole_buffers(const std::vector<FragmentAddress>& pieces, size_t state) const {
    if (pieces.empty()) return nullptr;
    pt::Tensor t;
    t.dtype = ix_.master_dtype;
    uint64_t numel = 0;
    for (const FragmentAddress& f : pieces) numel += ix_.params[f.param].numel;
    t.shape = {int64_t(numel)};
    build::Fill fill{t};
    for (const FragmentAddress& f : pieces) {
      const Param& p = ix_.params[f.param];
      for (const auto& e : element_extents(ix_.fragments(p, state), 0, p.numel, es_)) fill.bytes(src_.map(e));
    }
    return a_.make_tensor_node(std::move(t));
  }

  // One per-group value ('step', ...) as the source stored it; a tensor gets its own storage in
  // every group or sub-group, as in real files.
  const Node* value(const StepValue& v) const { return step_value_node(a_, v, src_.map); }

  // The source's hyper-parameters of group g, in the source's order, then 'params'.
  Node* param_group(size_t g, const Node* params) const {
    const Node* groups = ix_.param_groups;
    if (!groups || groups->kind != Kind::List || g >= groups->items.size())
      throw Error(ix_.dir + ": the source's param_groups do not cover group " + std::to_string(g), EIO);
    Node* d = build::dict(a_);
    for (const auto& [k, v] : groups->items[g]->entries)
      if (!(k->kind == Kind::Str && k->s == "params")) d->entries.emplace_back(k, v);
    build::add(d, a_, "params", params);
    return d;
  }

  // The state of the source group (or sub-group) `first_param` belongs to: the per-group values and
  // tensors (made by `tensor(state)`, nullptr for none) that group keeps; {} when the source never
  // stepped.
  Node* state_entry(uint32_t first_param, const std::function<const Node*(size_t)>& tensor) const {
    Node* d = build::dict(a_);
    if (!ix_.has_state()) return d;
    const Param& first = ix_.params.at(first_param);
    for (size_t k = 0; k < ix_.scalar_names.size(); ++k)
      if (const StepValue* v = ix_.value(first.step, k)) build::add(d, a_, ix_.scalar_names[k], value(*v));
    for (size_t k = 1; k < ix_.state_names.size(); ++k)
      if (const Node* t = ix_.has(first, k) ? tensor(k) : nullptr) build::add(d, a_, ix_.state_names[k], t);
    return d;
  }

  Scaler loss_scaler() const {
    const bool fp16 = plan_.target.precision == Precision::Fp16;
    const bool source_fp16 = source_layout(ix_, src_.options).precision == Precision::Fp16;
    if (fp16 && source_fp16 && ix_.loss_scaler.kind != LossScaler::None)
      return {meta("loss_scaler"), ix_.loss_scaler.kind == LossScaler::Dynamic};
    LossScaler s;  // DeepSpeed's defaults
    s.kind = fp16 ? LossScaler::Dynamic : LossScaler::Static;
    s.dynamic = fp16;
    if (fp16) s.cur_scale = kInitialDynamicScale;
    return {loss_scaler_pickle(a_, s), fp16};
  }

  // clip_grad: the source's, or (a ZeRO-3 source keeps none) its config's gradient_clipping [layouts §2.2].
  const Node* clip_grad(const Node* config) const {
    if (const Node* clip = meta("clip_grad")) return clip;
    const Node* c = config ? config->get("gradient_clipping") : nullptr;
    if (c && c->kind == Kind::Float) return c;
    return build::real(a_, c && c->kind == Kind::Int ? double(c->i) : 0.0);
  }

  const Node* overflow() const {
    const Node* o = meta("overflow");
    return o ? o : build::boolean(a_, false);
  }

  Node* zero3() const;
  Node* zero12(const Node* config) const;
  Node* slice_mappings(const RankPartition& rp) const;
  Node* zero12_state(const std::vector<RankPartition>& parts, Node* groups) const;
  // The first `numel` elements of a padded partition: a view that keeps the whole storage, as
  // torch.save keeps the storage of DeepSpeed's cut tensors.
  const Node* view(pt::Tensor padded, uint64_t numel, bool requires_grad) const {
    pt::Tensor v;
    v.dtype = padded.dtype;
    v.shape = {int64_t(numel)};
    v.made().storage_of = a_.make_tensor(std::move(padded));
    v.requires_grad = requires_grad;
    return a_.make_tensor_node(std::move(v));
  }

  pt::Arena& a_;
  const OptimSource& src_;
  const TagIndex& ix_;
  const PartitionPlan& plan_;
  uint32_t rank_;
  uint64_t es_;
};

// DeepSpeedZeroOptimizer_Stage3.state_dict() [layouts §2.2].
Node* OptimFile::zero3() const {
  Node* state = build::dict(a_);
  Node* fp32 = build::list(a_, {});
  for (size_t s = 0; s < plan_.sub_groups.size(); ++s) {
    const RankSubGroup rs = rank_sub_group(plan_, ix_, rank_, s);
    if (ix_.has_state())
      state->entries.emplace_back(a_.make_int(int64_t(s)), state_entry(plan_.sub_groups[s].params.at(0), [&](size_t k) {
                                    return a_.make_tensor_node(flat(rs.pieces, k, rs.numel));
                                  }));
    pt::Tensor t = flat(rs.pieces, 0, rs.numel);
    t.requires_grad = true;
    fp32->items.push_back(a_.make_tensor_node(std::move(t)));
  }
  Node* groups = build::list(a_, {});
  for (size_t g = 0; g < plan_.group_sub_groups.size(); ++g) {
    const std::vector<int64_t> ids(plan_.group_sub_groups[g].begin(), plan_.group_sub_groups[g].end());
    groups->items.push_back(param_group(g, build::int_list(a_, ids)));
  }
  Node* osd = build::dict(a_);
  build::add(osd, a_, "state", state);
  build::add(osd, a_, "param_groups", groups);
  const Scaler scaler = loss_scaler();
  Node* O = build::dict(a_);
  build::add(O, a_, "zero_stage", zero_stage_enum(a_, 3));
  build::add(O, a_, "loss_scaler", scaler.node);
  build::add(O, a_, "dynamic_loss_scale", build::boolean(a_, scaler.dynamic));
  build::add(O, a_, "overflow", overflow());
  build::add(O, a_, "partition_count", a_.make_int(int64_t(plan_.target.dp)));
  build::add(O, a_, "optimizer_state_dict", osd);
  build::add(O, a_, "fp32_flat_groups", fp32);
  return O;
}

// param_slice_mappings[g]: each parameter's fragment_address in the flat partition.
Node* OptimFile::slice_mappings(const RankPartition& rp) const {
  Node* m = build::ordered_dict(a_);
  for (const FragmentAddress& f : rp.mappings) {
    Node* addr = build::dict(a_);
    build::add(addr, a_, "numel", a_.make_int(int64_t(f.numel)));
    build::add(addr, a_, "start", a_.make_int(int64_t(f.start)));
    build::add(m, a_, ix_.params[f.param].name,
               build::new_object(a_, "deepspeed.utils.tensor_fragment", "fragment_address", addr));
  }
  return m;
}

// base_optimizer_state: the base optimizer's state_dict(), or, for an elastic source, its own
// form (a list of per-group states cut to the valid elements): the rigid form needs the param
// groups' hyper-parameters, which an elastic save does not keep.
Node* OptimFile::zero12_state(const std::vector<RankPartition>& parts, Node* groups) const {
  const bool elastic = ix_.elastic;
  Node* state = elastic ? build::list(a_, {}) : build::dict(a_);
  for (size_t g = 0; g < parts.size(); ++g) {
    const RankPartition& rp = parts[g];
    Node* entry = state_entry(plan_.groups[g].params.at(0), [&](size_t k) -> const Node* {
      if (ix_.whole(k)) return whole_buffers(rp.mappings, k);
      return elastic ? view(flat(rp.mappings, k, rp.partition), rp.valid, false)
                     : a_.make_tensor_node(flat(rp.mappings, k, rp.partition));
    });
    if (elastic)
      state->items.push_back(entry);
    else if (ix_.has_state() && !entry->entries.empty())  // torch saves no state for a parameter without one
      state->entries.emplace_back(a_.make_int(int64_t(g)), entry);
  }
  if (elastic) return state;
  Node* base = build::dict(a_);
  build::add(base, a_, "state", state);
  build::add(base, a_, "param_groups", groups);
  return base;
}

// DeepSpeedZeroOptimizer.state_dict() and BF16_Optimizer.state_dict() [layouts §2.2].
Node* OptimFile::zero12(const Node* config) const {
  const bool bf16opt = plan_.target.stage == TargetStage::Bf16Opt;
  std::vector<RankPartition> parts;
  Node* groups = build::list(a_, {});
  Node* fp32 = build::list(a_, {});
  Node* paddings = build::list(a_, {});
  Node* counts = build::list(a_, {});
  Node* mappings = build::list(a_, {});
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const RankPartition& rp = parts.emplace_back(rank_slice(plan_, ix_, rank_, g));
    groups->items.push_back(param_group(g, build::int_list(a_, {int64_t(g)})));
    // ZeRO-1/2 keep a (L_r,) view of the padded partition; BF16_Optimizer keeps all P elements.
    fp32->items.push_back(view(flat(rp.mappings, 0, rp.partition), rp.fp32_numel, true));
    paddings->items.push_back(a_.make_int(int64_t(rp.padding)));
    counts->items.push_back(a_.make_int(int64_t(plan_.target.dp)));
    mappings->items.push_back(slice_mappings(rp));
  }
  Node* O = build::dict(a_);
  if (!bf16opt) {
    const Scaler scaler = loss_scaler();
    build::add(O, a_, "loss_scaler", scaler.node);
    build::add(O, a_, "dynamic_loss_scale", build::boolean(a_, scaler.dynamic));
    build::add(O, a_, "overflow", overflow());
  }
  build::add(O, a_, "clip_grad", clip_grad(config));
  build::add(O, a_, "base_optimizer_state", zero12_state(parts, groups));
  // An elastic save's param-group 'step' (FusedAdam keeps one), which a rigid engine requires.
  if (const Node* step = meta("base_optimizer_state_step"); ix_.elastic && step)
    build::add(O, a_, "base_optimizer_state_step", step);
  build::add(O, a_, "single_partition_of_fp32_groups", fp32);
  if (!bf16opt) build::add(O, a_, "zero_stage", zero_stage_enum(a_, plan_.target.stage == TargetStage::Zero1 ? 1 : 2));
  build::add(O, a_, "group_paddings", paddings);
  build::add(O, a_, "partition_count", counts);
  build::add(O, a_, "ds_version", a_.make_str(written_ds_version(ix_)));
  build::add(O, a_, "param_slice_mappings", mappings);
  return O;
}

}  // namespace

const Node* optim_states_pickle(pt::Arena& a, const OptimSource& src, uint32_t rank) {
  return OptimFile(a, src, rank).pickle();
}

}  // namespace zm::ds
