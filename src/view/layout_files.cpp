// The model-state and optimizer-state files of a faked layout, rank by rank
// (docs/fake-layouts-plan.md §3 and §4 list every key, in order, and where each value comes from).
#include "layout_files.h"

#include <algorithm>
#include <filesystem>
#include <functional>

#include "zeromount/ds/shard_names.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_writer.h"

namespace zm::view {

using pt::Kind;
using pt::Node;

namespace {

// --- tensors from pieces -------------------------------------------------------------------

// A tensor's data as it is assembled: source extents, zero fill and computed pieces (value.h).
struct Fill {
  pt::Tensor& t;
  void bytes(const pt::Extent& e) {
    if (e.length) t.data.push_back(e);
  }
  void zero(uint64_t n) {
    if (n) t.data.push_back({pt::kZeroFill, 0, n});
  }
  // `numel` elements stored as `source` in dtype `from`, in the tensor's dtype.
  void values(std::vector<pt::Extent> source, pt::DType from, uint64_t numel) {
    if (!numel) return;
    if (from == t.dtype) {
      for (const auto& e : source) bytes(e);
      return;
    }
    // A 16-bit module weight made from its fp32 master only when it is read (spec §4.1).
    auto c = std::make_shared<pt::ConvertedExtents>(std::move(source), from, t.dtype, numel, "layouts");
    t.append_computed(std::move(c));
  }
};

// File-table extents of elements [from, from + count) of a flat state made of `frags`.
std::vector<pt::Extent> elements(const MountedTag& t, const std::vector<ds::Fragment>& frags, uint64_t from,
                                 uint64_t count, uint64_t es) {
  std::vector<pt::Extent> out;
  uint64_t have = 0;
  for (const ds::Fragment& f : frags) {
    const uint64_t lo = std::max(from, f.start), hi = std::min(from + count, f.start + f.numel);
    if (lo >= hi) continue;
    out.push_back(t.map({f.extent.file, f.extent.offset + (lo - f.start) * es, (hi - lo) * es}));
    have += hi - lo;
  }
  if (have != count) throw Error("layouts: the index does not cover a parameter's elements", EIO);
  return out;
}

// Bytes [from, from + n) of a plain tensor's concatenated extents, in file-table ids.
std::vector<pt::Extent> plain_bytes(const MountedTag& t, const ds::PlainTensor& p, uint64_t from, uint64_t n) {
  std::vector<pt::Extent> out;
  uint64_t at = 0;
  for (const pt::Extent& e : p.data) {
    const uint64_t lo = std::max(from, at), hi = std::min(from + n, at + e.length);
    if (lo < hi) out.push_back(t.map({e.file, e.offset + (lo - at), hi - lo}));
    at += e.length;
  }
  return out;
}

// --- pickle values --------------------------------------------------------------------------

void set(Node* dict, pt::Arena& a, const char* key, const Node* value) {
  dict->entries.emplace_back(a.make_str(key), value);
}
Node* ordered_dict(pt::Arena& a) {
  Node* d = a.make(Kind::Dict);
  d->b = true;
  return d;
}
Node* boolean(pt::Arena& a, bool v) {
  Node* n = a.make(Kind::Bool);
  n->b = v;
  return n;
}
Node* real(pt::Arena& a, double v) {
  Node* n = a.make(Kind::Float);
  n->f = v;
  return n;
}
Node* tuple(pt::Arena& a, std::vector<const Node*> items) {
  Node* n = a.make(Kind::Tuple);
  n->items = std::move(items);
  return n;
}
Node* int_list(pt::Arena& a, const std::vector<int64_t>& v) {
  Node* n = a.make(Kind::List);
  for (int64_t x : v) n->items.push_back(a.make_int(x));
  return n;
}
// torch.Size(dims): REDUCE of GLOBAL 'torch Size' on a tuple of ints.
Node* torch_size(pt::Arena& a, const std::vector<int64_t>& dims) {
  std::vector<const Node*> d;
  for (int64_t x : dims) d.push_back(a.make_int(x));
  Node* n = a.make(Kind::Object);
  n->callee = a.make_global("torch", "Size");
  n->args = tuple(a, {tuple(a, std::move(d))});
  return n;
}
// A dataclass or plain object as protocol 2 pickles it: NEWOBJ of the class, BUILD of its __dict__.
Node* new_object(pt::Arena& a, const char* module, const char* cls, const Node* state) {
  Node* n = a.make(Kind::Object);
  n->how = pt::Build::NewObj;
  n->callee = a.make_global(module, cls);
  n->args = tuple(a, {});
  n->state = state;
  return n;
}
Node* zero_stage(pt::Arena& a, int stage) {
  Node* n = a.make(Kind::Object);
  n->callee = a.make_global("deepspeed.runtime.zero.config", "ZeroStageEnum");
  n->args = tuple(a, {a.make_int(stage)});
  return n;
}

Node* tensor(pt::Arena& a, pt::Tensor t) {
  return a.make_tensor_node(std::move(t));
}

pt::DType lp_dtype(ds::Precision p) {
  return p == ds::Precision::Fp32 ? pt::DType::F32 : p == ds::Precision::Bf16 ? pt::DType::BF16 : pt::DType::F16;
}

std::string stem(const std::string& name) {
  return std::filesystem::path(name).stem().string();
}

}  // namespace

LayoutTag::LayoutTag(const MountedTag& tag, const ds::TargetLayout& target)
    : tag_(tag), options_(ds::source_options(*tag.index)), plan_(ds::plan_partitions(*tag.index, target, options_)) {
  for (size_t k = 0; k < tag.index->params.size(); ++k) by_name_.emplace(tag.index->params[k].name, k);
}

const pt::PtFile& LayoutTag::source_model() const {
  std::call_once(loaded_, [this] {
    const ds::TagIndex& ix = *tag_.index;
    model_ = pt::load_pt(ix.model_files.at(0));
    // Stage 1/2 and BF16_Optimizer sources keep every frozen param in 'module' (stage 1 and BF16
    // have no frozen_param_fragments); stage 3 only in its fragments.
    frozen_ = ix.stage == 3 || ix.module_frozen.empty() ? ix.frozen : ix.module_frozen;
  });
  return *model_;
}

const std::vector<ds::PlainTensor>& LayoutTag::frozen() const {
  source_model();
  return frozen_;
}

size_t LayoutTag::param_index(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? std::string::npos : it->second;
}

namespace {
std::string optim_prefix(const ds::TargetLayout& t) {
  return t.stage == ds::TargetStage::Bf16Opt || t.precision == ds::Precision::Bf16 ? "bf16_" : "";
}
}  // namespace

uint64_t LayoutTag::files() const {
  return uint64_t(target().dp) * (zero3() ? 2 : 1) + (zero3() ? 0 : 1);
}

std::string LayoutTag::file_name(uint64_t k) const {
  const uint64_t models = zero3() ? target().dp : 1;
  if (k < models) return zero3() ? ds::zero_model_states_name(int(k), 0) : ds::model_states_name(0);
  return ds::optim_states_name(optim_prefix(target()), int(k - models), 0);
}

std::optional<uint64_t> LayoutTag::file_index(std::string_view name) const {
  const auto parsed = ds::parse_shard_name(name);
  if (!parsed || parsed->mp != 0 || parsed->dp < 0 || uint64_t(parsed->dp) >= target().dp) return std::nullopt;
  const uint64_t models = zero3() ? target().dp : 1;
  std::optional<uint64_t> k;
  if (parsed->kind == ds::FileKind::OptimStates) k = models + uint64_t(parsed->dp);
  if (parsed->kind == (zero3() ? ds::FileKind::ZeroModelStates : ds::FileKind::ModelStates))
    k = zero3() ? uint64_t(parsed->dp) : 0;
  if (k && file_name(*k) == name) return k;  // exactly one spelling per file
  return std::nullopt;
}

pt::VirtualFile LayoutTag::build(uint64_t k) const {
  const uint64_t models = zero3() ? target().dp : 1;
  return k < models ? model_states(uint32_t(k)) : optim_states(uint32_t(k - models));
}

// --- model states (plan §3) -----------------------------------------------------------------

pt::VirtualFile LayoutTag::model_states(uint32_t rank) const {
  const ds::TagIndex& ix = *tag_.index;
  const ds::TargetLayout& tg = target();
  const pt::DType lp = lp_dtype(tg.precision);
  const uint64_t W = tg.dp;
  const pt::PtFile& src = source_model();
  pt::Arena a;

  // Module tensors by name: trainable ones view one lp storage per group (zero1/2, bf16opt), or
  // are empty (zero3); frozen ones are cast to lp; buffers are verbatim. The storage is the lp copy
  // of the masters, which sit in param order; with round robin the views are in flat order.
  std::unordered_map<std::string, const Node*> module_tensors;
  for (const ds::FlatGroup& g : plan_.groups) {
    pt::Tensor base;
    base.dtype = lp;
    base.shape = {int64_t(g.padded)};
    Fill fill{base};
    uint64_t at = 0;
    for (size_t j = 0; j < g.params.size(); ++j) {
      const ds::Param& p = ix.params[g.params[j]];
      fill.zero((g.offsets[j] - at) * pt::element_size(lp));
      fill.values(elements(tag_, ix.fragments(p, 0), 0, p.numel, pt::element_size(ix.master_dtype)), ix.master_dtype,
                  p.numel);
      at = g.offsets[j] + p.numel;
    }
    fill.zero((g.padded - at) * pt::element_size(lp));
    const pt::Tensor* storage = a.make_tensor(std::move(base));
    for (size_t j = 0; j < g.flat.size(); ++j) {
      const ds::Param& p = ix.params[g.flat[j]];
      pt::Tensor v;
      v.dtype = lp;
      v.shape = p.shape;
      v.storage_of = storage;
      v.storage_offset = int64_t(g.flat_offsets[j]);
      module_tensors[p.name] = tensor(a, std::move(v));
    }
  }
  auto empty = [&] {
    pt::Tensor t;
    t.dtype = lp;
    t.shape = {0};
    return tensor(a, std::move(t));
  };
  if (zero3())
    for (const ds::Param& p : ix.params) module_tensors[p.name] = empty();
  std::unordered_map<std::string, const Node*> frozen_full;  // zero1/2/bf16opt: lp, full shape
  Node* frozen_fragments = ordered_dict(a);
  Node* frozen_shapes = ordered_dict(a);
  for (const ds::PlainTensor& f : frozen()) {
    const uint64_t n = f.numel(), es = pt::element_size(f.dtype);
    set(frozen_shapes, a, f.name.c_str(), torch_size(a, f.shape));
    if (zero3()) {
      module_tensors[f.name] = empty();
      const uint64_t part = ds::zero3_partition(n, W), valid = ds::valid_on_rank(n, part, rank);
      pt::Tensor t;
      t.dtype = lp;
      t.shape = {int64_t(part)};
      Fill fill{t};
      fill.values(plain_bytes(tag_, f, part * rank * es, valid * es), f.dtype, valid);
      fill.zero((part - valid) * pt::element_size(lp));
      set(frozen_fragments, a, f.name.c_str(), tensor(a, std::move(t)));
      continue;
    }
    pt::Tensor t;
    t.dtype = lp;
    t.shape = f.shape;
    Fill{t}.values(plain_bytes(tag_, f, 0, n * es), f.dtype, n);
    const Node* node = tensor(a, std::move(t));
    module_tensors[f.name] = frozen_full[f.name] = node;
    set(frozen_fragments, a, f.name.c_str(), node);  // zero2 shares the module's storage
  }
  // Each ZeRO-3 rank keeps its own buffers: at the source's DP size rank r gets rank r's; at any
  // other, no target rank is a source rank, and every file gets rank 0's (as ZeRO-1/2 files do).
  const bool own_buffers = zero3() && W == uint64_t(ix.dp) && rank < ix.rank_buffers.size();
  for (const ds::PlainTensor& b : own_buffers ? ix.rank_buffers[rank] : ix.buffers) {
    pt::Tensor t;
    t.dtype = b.dtype;
    t.shape = b.shape;
    Fill{t}.values(plain_bytes(tag_, b, 0, b.numel() * pt::element_size(b.dtype)), b.dtype, b.numel());
    module_tensors[b.name] = tensor(a, std::move(t));
  }
  for (const auto& [alias, canonical] : ix.shared)
    if (auto it = module_tensors.find(canonical); it != module_tensors.end()) module_tensors[alias] = it->second;

  const Node* src_module = src.root->get("module");
  if (!src_module || src_module->kind != Kind::Dict)
    throw Error(ix.model_files.at(0) + ": no 'module' state dict to present", EIO);
  Node* module = ordered_dict(a);
  module->state = src_module->state;  // _metadata
  for (const auto& [k, v] : src_module->entries) {
    auto it = k->kind == Kind::Str ? module_tensors.find(k->s) : module_tensors.end();
    if (it == module_tensors.end())
      throw Error(ix.model_files.at(0) + ": module entry '" + k->s +
                      "' is neither a parameter, a frozen parameter nor a buffer of the index",
                  EIO);
    module->entries.emplace_back(k, it->second);
  }

  Node* shapes = a.make(Kind::List);
  auto shape_dict = [&](const std::vector<uint32_t>& params) {
    Node* d = ordered_dict(a);
    for (uint32_t k : params) set(d, a, ix.params[k].name.c_str(), torch_size(a, ix.params[k].shape));
    shapes->items.push_back(d);
  };
  for (const ds::FlatGroup& g : plan_.groups) shape_dict(g.flat);
  for (const ds::SubGroup& s : plan_.sub_groups) shape_dict(s.params);

  const bool keeps_frozen = tg.stage == ds::TargetStage::Zero2 || zero3();
  Node* root = a.make(Kind::Dict);
  for (const auto& [k, v] : src.root->entries) {
    const std::string_view key = k->kind == Kind::Str ? std::string_view(k->s) : std::string_view();
    const Node* out = v;
    if (key == "module")
      out = module;
    else if (key == "param_shapes")
      out = shapes;
    else if (key == "frozen_param_shapes")
      out = keeps_frozen ? frozen_shapes : a.make(Kind::None);
    else if (key == "frozen_param_fragments")
      out = keeps_frozen ? frozen_fragments : a.make(Kind::None);
    else if (key == "shared_params" && zero3() && rank != 0)
      out = a.make(Kind::Dict);
    else if (key == "dp_world_size")
      out = a.make_int(int64_t(W));
    else if (key == "mp_world_size")
      out = a.make_int(1);
    root->entries.emplace_back(k, out);
  }
  pt::PtOptions o;
  o.prefix = stem(file_name(zero3() ? rank : 0));
  o.crc_source = tag_.crc_source;
  return pt::build_pt(root, o);
}

// --- optimizer states (plan §4) -------------------------------------------------------------

pt::VirtualFile LayoutTag::optim_states(uint32_t rank) const {
  const ds::TagIndex& ix = *tag_.index;
  const ds::TargetLayout& tg = target();
  const pt::PtFile& src = source_model();
  const uint64_t es = pt::element_size(ix.master_dtype);
  const size_t states = ix.state_names.size();
  pt::Arena a;
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
    return a.make(Kind::None);
  };
  // SRC's hyper-parameters of group g, in SRC's order, then 'params'.
  auto param_group = [&](size_t g, Node* params) {
    const Node* groups = ix.param_groups;
    if (!groups || groups->kind != Kind::List || g >= groups->items.size())
      throw Error(ix.dir + ": the source's param_groups do not cover group " + std::to_string(g), EIO);
    Node* d = a.make(Kind::Dict);
    for (const auto& [k, v] : groups->items[g]->entries)
      if (!(k->kind == Kind::Str && k->s == "params")) d->entries.emplace_back(k, v);
    set(d, a, "params", params);
    return d;
  };
  // The state of the source group (or sub-group) `first_param` belongs to: its per-group values,
  // then its partitioned tensors; {} when the source never stepped.
  auto state_entry = [&](uint32_t first_param, const std::function<const Node*(size_t)>& state_tensor) {
    Node* d = a.make(Kind::Dict);
    if (!ix.has_state()) return d;
    const auto& values = ix.scalars.at(size_t(ix.params.at(first_param).step));
    for (size_t k = 0; k < values.size(); ++k) set(d, a, ix.scalar_names[k].c_str(), scalar(values[k]));
    for (size_t k = 1; k < states; ++k) set(d, a, ix.state_names[k].c_str(), state_tensor(k));
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
    Node* s = a.make(Kind::Dict);
    set(s, a, "cur_scale", real(a, 65536.0));
    set(s, a, "dynamic", boolean(a, true));
    set(s, a, "cur_iter", a.make_int(0));
    set(s, a, "last_overflow_iter", a.make_int(-1));
    set(s, a, "scale_factor", real(a, 2.0));
    set(s, a, "scale_window", a.make_int(1000));
    set(s, a, "min_scale", a.make_int(1));
    set(s, a, "delayed_shift", a.make_int(2));
    set(s, a, "cur_hysteresis", a.make_int(2));
    set(s, a, "consecutive_hysteresis", boolean(a, false));
    set(s, a, "raise_error_at_min_scale", boolean(a, true));
    set(s, a, "dtype", a.make_global("torch", "float16"));
    scaler = new_object(a, "deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler", s);
    dynamic = true;
  } else {
    Node* s = a.make(Kind::Dict);
    set(s, a, "cur_scale", real(a, 1.0));
    set(s, a, "dynamic", boolean(a, false));
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

  Node* O = a.make(Kind::Dict);
  if (zero3()) {
    Node* state = a.make(Kind::Dict);
    Node* fp32 = a.make(Kind::List);
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
    Node* groups = a.make(Kind::List);
    for (size_t g = 0; g < plan_.group_sub_groups.size(); ++g) {
      std::vector<int64_t> ids(plan_.group_sub_groups[g].begin(), plan_.group_sub_groups[g].end());
      groups->items.push_back(param_group(g, int_list(a, ids)));
    }
    Node* osd = a.make(Kind::Dict);
    set(osd, a, "state", state);
    set(osd, a, "param_groups", groups);
    set(O, a, "zero_stage", zero_stage(a, 3));
    set(O, a, "loss_scaler", scaler);
    set(O, a, "dynamic_loss_scale", boolean(a, dynamic));
    set(O, a, "overflow", overflow);
    set(O, a, "partition_count", a.make_int(int64_t(tg.dp)));
    set(O, a, "optimizer_state_dict", osd);
    set(O, a, "fp32_flat_groups", fp32);
  } else {
    const bool bf16opt = tg.stage == ds::TargetStage::Bf16Opt;
    // An elastic source is written in its own form (a list of per-group states cut to the valid
    // elements): the rigid form needs the param groups' hyper-parameters, which it did not save.
    const bool elastic = ix.elastic;
    Node* state = a.make(elastic ? Kind::List : Kind::Dict);
    Node* groups = a.make(Kind::List);
    Node* fp32 = a.make(Kind::List);
    Node* paddings = a.make(Kind::List);
    Node* counts = a.make(Kind::List);
    Node* mappings = a.make(Kind::List);
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
        Node* addr = a.make(Kind::Dict);
        set(addr, a, "numel", a.make_int(int64_t(f.numel)));
        set(addr, a, "start", a.make_int(int64_t(f.start)));
        set(m, a, ix.params[f.param].name.c_str(),
            new_object(a, "deepspeed.utils.tensor_fragment", "fragment_address", addr));
      }
      mappings->items.push_back(m);
    }
    Node* base = state;
    if (!elastic) {
      base = a.make(Kind::Dict);
      set(base, a, "state", state);
      set(base, a, "param_groups", groups);
    }
    if (!bf16opt) {
      set(O, a, "loss_scaler", scaler);
      set(O, a, "dynamic_loss_scale", boolean(a, dynamic));
      set(O, a, "overflow", overflow);
    }
    set(O, a, "clip_grad", clip);
    set(O, a, "base_optimizer_state", base);
    // An elastic save's param-group 'step' (FusedAdam keeps one), which a rigid engine requires.
    if (const Node* step = meta_get("base_optimizer_state_step"); elastic && step)
      set(O, a, "base_optimizer_state_step", step);
    set(O, a, "single_partition_of_fp32_groups", fp32);
    if (!bf16opt) set(O, a, "zero_stage", zero_stage(a, tg.stage == ds::TargetStage::Zero1 ? 1 : 2));
    set(O, a, "group_paddings", paddings);
    set(O, a, "partition_count", counts);
    set(O, a, "ds_version", a.make_str(ix.ds_version));
    set(O, a, "param_slice_mappings", mappings);
  }
  Node* root = a.make(Kind::Dict);
  set(root, a, "optimizer_state_dict", O);
  set(root, a, "ds_config", config ? config : a.make(Kind::None));
  const Node* version = src.root->get("ds_version");
  set(root, a, "ds_version", version ? version : a.make_str(ix.ds_version));
  pt::PtOptions o;
  o.prefix = stem(file_name((zero3() ? tg.dp : 1) + rank));
  o.crc_source = tag_.crc_source;
  return pt::build_pt(root, o);
}

}  // namespace zm::view
