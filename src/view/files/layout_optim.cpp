// The optimizer-state files of a faked layout, rank by rank (docs/fake-layouts-plan.md §4 lists
// every key, in order, and where each value comes from).
#include <functional>

#include "layout_values.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/view/files/layout_files.h"

namespace zm::view {

using namespace layout;

// --- optimizer states (plan §4) -------------------------------------------------------------

const pt::Node* LayoutTag::optim_states(uint32_t rank, pt::Arena& a) const {
  const ds::TagIndex& ix = *tag_.index;
  const ds::TargetLayout& tg = target();
  const pt::PtFile& src = source_model();
  const uint64_t es = pt::element_size(ix.master_dtype);
  const size_t states = ix.state_names.size();
  const Node* meta = ix.optim_meta;
  auto meta_get = [&](const char* key) { return meta ? meta->get(key) : nullptr; };

  // A flat state tensor of `numel` master-dtype elements: the pieces' elements at their starts,
  // zeros elsewhere (padding is zero, as gradients are in real runs).
  auto flat = [&](const std::vector<ds::FragmentAddress>& pieces, size_t state, uint64_t numel) {
    pt::Tensor t;
    t.dtype = ix.master_dtype;
    t.shape = {int64_t(numel)};
    Fill fill{t};
    uint64_t at = 0;
    for (const ds::FragmentAddress& f : pieces) {
      fill.zero((f.start - at) * es);
      // Only the source pieces that overlap this rank's range: a ZeRO-3 source has one per source rank.
      const auto src = ix.fragments(ix.params[f.param], state, f.param_start, f.numel);
      for (const auto& e : elements(tag_, src, f.param_start, f.numel, es)) fill.bytes(e);
      at = f.start + f.numel;
    }
    fill.zero((numel - at) * es);
    return t;
  };
  // One per-group value ('step', ...) as the source stored it; a tensor gets its own storage in
  // every group or sub-group, as in real files.
  auto scalar = [&](const ds::StepValue& v) -> const Node* {
    switch (v.kind) {
      case ds::StepValue::Tensor: {
        pt::Tensor t;
        t.dtype = v.dtype;
        t.shape = v.shape;
        t.data = {tag_.map(v.extent)};
        return tensor(a, std::move(t));
      }
      case ds::StepValue::Int:
        return a.make_int(v.i);
      case ds::StepValue::Float:
        return real(a, v.f);
      case ds::StepValue::None:
        break;
    }
    return pt::build::none(a);
  };
  // SRC's hyper-parameters of group g, in SRC's order, then 'params'.
  auto param_group = [&](size_t g, Node* params) {
    const Node* groups = ix.param_groups;
    if (!groups || groups->kind != Kind::List || g >= groups->items.size())
      throw Error(ix.dir + ": the source's param_groups do not cover group " + std::to_string(g), EIO);
    Node* d = pt::build::dict(a);
    for (const auto& [k, v] : groups->items[g]->entries)
      if (!(k->kind == Kind::Str && k->s == "params")) d->entries.emplace_back(k, v);
    add(d, a, "params", params);
    return d;
  };
  // The state of the source group (or sub-group) `first_param` belongs to: its per-group values,
  // then its partitioned tensors; {} when the source never stepped.
  auto state_entry = [&](uint32_t first_param, const std::function<const Node*(size_t)>& state_tensor) {
    Node* d = pt::build::dict(a);
    if (!ix.has_state()) return d;
    const auto& values = ix.scalars.at(size_t(ix.params.at(first_param).step));
    for (size_t k = 0; k < values.size(); ++k) add(d, a, ix.scalar_names[k].c_str(), scalar(values[k]));
    for (size_t k = 1; k < states; ++k) add(d, a, ix.state_names[k].c_str(), state_tensor(k));
    return d;
  };

  // Loss scaler (spec §4.1): fp16 keeps an fp16 source's scaler, else DeepSpeed's defaults;
  // fp32/bf16 have a static scale of 1.
  const Node* scaler = nullptr;
  bool dynamic = false;
  const Node* src_scaler = meta_get("loss_scaler");
  const bool src_fp16 = ds::source_layout(ix, options_).precision == ds::Precision::Fp16;
  if (tg.precision == ds::Precision::Fp16 && src_fp16 && src_scaler) {
    scaler = src_scaler;
    const Node* d = meta_get("dynamic_loss_scale");
    dynamic = d && d->kind == Kind::Bool && d->b;
  } else if (tg.precision == ds::Precision::Fp16) {
    Node* s = pt::build::dict(a);
    add(s, a, "cur_scale", real(a, 65536.0));
    add(s, a, "dynamic", boolean(a, true));
    add(s, a, "cur_iter", a.make_int(0));
    add(s, a, "last_overflow_iter", a.make_int(-1));
    add(s, a, "scale_factor", real(a, 2.0));
    add(s, a, "scale_window", a.make_int(1000));
    add(s, a, "min_scale", a.make_int(1));
    add(s, a, "delayed_shift", a.make_int(2));
    add(s, a, "cur_hysteresis", a.make_int(2));
    add(s, a, "consecutive_hysteresis", boolean(a, false));
    add(s, a, "raise_error_at_min_scale", boolean(a, true));
    add(s, a, "dtype", a.make_global("torch", "float16"));
    scaler = new_object(a, "deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler", s);
    dynamic = true;
  } else {
    Node* s = pt::build::dict(a);
    add(s, a, "cur_scale", real(a, 1.0));
    add(s, a, "dynamic", boolean(a, false));
    scaler = new_object(a, "deepspeed.runtime.fp16.loss_scaler", "LossScaler", s);
  }
  const Node* overflow = meta_get("overflow");
  if (!overflow) overflow = boolean(a, false);
  const Node* config = src.root->get("ds_config");
  const Node* clip = meta_get("clip_grad");
  if (!clip) {  // a ZeRO-3 source: the config's gradient_clipping (spec §2.2)
    const Node* c = config ? config->get("gradient_clipping") : nullptr;
    clip = c && c->kind == Kind::Float ? c : real(a, c && c->kind == Kind::Int ? double(c->i) : 0.0);
  }

  Node* O = pt::build::dict(a);
  if (zero3()) {
    Node* state = pt::build::dict(a);
    Node* fp32 = pt::build::list(a, {});
    for (size_t s = 0; s < plan_.sub_groups.size(); ++s) {
      const ds::RankSubGroup rs = ds::rank_sub_group(plan_, ix, rank, s);
      const ds::SubGroup& sg = plan_.sub_groups[s];
      if (ix.has_state())
        state->entries.emplace_back(a.make_int(int64_t(s)), state_entry(sg.params.at(0), [&](size_t k) {
                                      return tensor(a, flat(rs.pieces, k, rs.numel));
                                    }));
      pt::Tensor t = flat(rs.pieces, 0, rs.numel);
      t.requires_grad = true;
      fp32->items.push_back(tensor(a, std::move(t)));
    }
    Node* groups = pt::build::list(a, {});
    for (size_t g = 0; g < plan_.group_sub_groups.size(); ++g) {
      std::vector<int64_t> ids(plan_.group_sub_groups[g].begin(), plan_.group_sub_groups[g].end());
      groups->items.push_back(param_group(g, int_list(a, ids)));
    }
    Node* osd = pt::build::dict(a);
    add(osd, a, "state", state);
    add(osd, a, "param_groups", groups);
    add(O, a, "zero_stage", zero_stage(a, 3));
    add(O, a, "loss_scaler", scaler);
    add(O, a, "dynamic_loss_scale", boolean(a, dynamic));
    add(O, a, "overflow", overflow);
    add(O, a, "partition_count", a.make_int(int64_t(tg.dp)));
    add(O, a, "optimizer_state_dict", osd);
    add(O, a, "fp32_flat_groups", fp32);
  } else {
    const bool bf16opt = tg.stage == ds::TargetStage::Bf16Opt;
    // An elastic source is written in its own form (a list of per-group states cut to the valid
    // elements): the rigid form needs the param groups' hyper-parameters, which it did not save.
    const bool elastic = ix.elastic;
    Node* state = a.make(elastic ? Kind::List : Kind::Dict);
    Node* groups = pt::build::list(a, {});
    Node* fp32 = pt::build::list(a, {});
    Node* paddings = pt::build::list(a, {});
    Node* counts = pt::build::list(a, {});
    Node* mappings = pt::build::list(a, {});
    // The first `numel` elements of a padded partition: a view that keeps the whole storage, as
    // torch.save keeps the storage of DeepSpeed's cut tensors.
    auto view = [&](pt::Tensor padded, uint64_t numel, bool requires_grad) {
      pt::Tensor v;
      v.dtype = padded.dtype;
      v.shape = {int64_t(numel)};
      v.storage_of = a.make_tensor(std::move(padded));
      v.requires_grad = requires_grad;
      return tensor(a, std::move(v));
    };
    for (size_t g = 0; g < plan_.groups.size(); ++g) {
      const ds::RankPartition rp = ds::rank_slice(plan_, ix, rank, g);
      Node* entry = state_entry(plan_.groups[g].params.at(0), [&](size_t k) {
        return elastic ? view(flat(rp.mappings, k, rp.partition), rp.valid, false)
                       : tensor(a, flat(rp.mappings, k, rp.partition));
      });
      if (elastic)
        state->items.push_back(entry);
      else if (ix.has_state())
        state->entries.emplace_back(a.make_int(int64_t(g)), entry);
      groups->items.push_back(param_group(g, int_list(a, {int64_t(g)})));
      // zero1/2 keep a (L_r,) view of the padded partition; BF16_Optimizer keeps all P elements.
      fp32->items.push_back(view(flat(rp.mappings, 0, rp.partition), rp.fp32_numel, true));
      paddings->items.push_back(a.make_int(int64_t(rp.padding)));
      counts->items.push_back(a.make_int(int64_t(tg.dp)));
      Node* m = ordered_dict(a);
      for (const ds::FragmentAddress& f : rp.mappings) {
        Node* addr = pt::build::dict(a);
        add(addr, a, "numel", a.make_int(int64_t(f.numel)));
        add(addr, a, "start", a.make_int(int64_t(f.start)));
        add(m, a, ix.params[f.param].name.c_str(),
            new_object(a, "deepspeed.utils.tensor_fragment", "fragment_address", addr));
      }
      mappings->items.push_back(m);
    }
    Node* base = state;
    if (!elastic) {
      base = pt::build::dict(a);
      add(base, a, "state", state);
      add(base, a, "param_groups", groups);
    }
    if (!bf16opt) {
      add(O, a, "loss_scaler", scaler);
      add(O, a, "dynamic_loss_scale", boolean(a, dynamic));
      add(O, a, "overflow", overflow);
    }
    add(O, a, "clip_grad", clip);
    add(O, a, "base_optimizer_state", base);
    // An elastic save's param-group 'step' (FusedAdam keeps one), which a rigid engine requires.
    if (const Node* step = meta_get("base_optimizer_state_step"); elastic && step)
      add(O, a, "base_optimizer_state_step", step);
    add(O, a, "single_partition_of_fp32_groups", fp32);
    if (!bf16opt) add(O, a, "zero_stage", zero_stage(a, tg.stage == ds::TargetStage::Zero1 ? 1 : 2));
    add(O, a, "group_paddings", paddings);
    add(O, a, "partition_count", counts);
    add(O, a, "ds_version", a.make_str(ix.ds_version));
    add(O, a, "param_slice_mappings", mappings);
  }
  Node* root = pt::build::dict(a);
  add(root, a, "optimizer_state_dict", O);
  add(root, a, "ds_config", config ? config : pt::build::none(a));
  const Node* version = src.root->get("ds_version");
  add(root, a, "ds_version", version ? version : a.make_str(ix.ds_version));
  return root;
}

}  // namespace zm::view
