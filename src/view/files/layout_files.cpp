// A faked layout of one tag: its plan, its file names and its model-state files, rank by rank
// (docs/fake-layouts-plan.md §3 lists every key, in order, and where each value comes from).
#include "zeromount/view/files/layout_files.h"

#include "zeromount/view/memo.h"

#include <atomic>
#include <map>
#include <mutex>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "zeromount/ds/optim_file.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/pt/value.h"
#include "zeromount/view/mounted_tag.h"

// The pieces the faked layout files are made of: tensors assembled from source extents, zero fill and
// computed bytes, and the pickle values DeepSpeed's files hold.
namespace zm::view {

namespace {

using pt::Kind;
using pt::Node;

// --- tensors from pieces -------------------------------------------------------------------

using pt::build::Fill;

// File-table extents of elements [from, from + count) of a flat state made of `frags`.
std::vector<pt::Extent> elements(const MountedTag& t, const std::vector<ds::Fragment>& frags, uint64_t from,
                                 uint64_t count, uint64_t es) {
  std::vector<pt::Extent> out = ds::element_extents(frags, from, count, es);
  for (auto& e : out) e = t.map(e);
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

// The pickle values of DeepSpeed's files: pt's builder vocabulary, and what only these files hold.
using pt::build::add;
using pt::build::ordered_dict;
using pt::build::torch_size;

pt::DType lp_dtype(ds::Precision p) {
  return p == ds::Precision::Fp32 ? pt::DType::F32 : p == ds::Precision::Bf16 ? pt::DType::BF16 : pt::DType::F16;
}

std::string stem(const std::string& name) {
  return std::filesystem::path(name).stem().string();
}

std::string optim_prefix(const ds::TargetLayout& t) {
  return t.stage == ds::TargetStage::Bf16Opt || t.precision == ds::Precision::Bf16 ? "bf16_" : "";
}

// A tag's decoded model-state pickle, one per tag however many of its targets have plans: the
// plans share it, and it is let go with the last of them (issue 29: 8 plans of a 20,000-parameter
// tag held 8 decoded copies, 90 MiB each). The map holds only weak references, one per tag.
std::atomic<uint64_t> g_decodes{0};

std::shared_ptr<const pt::PtFile> shared_source(const MountedTag& tag) {
  static std::mutex mu;
  static std::map<const MountedTag*, std::weak_ptr<const pt::PtFile>> decoded;
  std::lock_guard<std::mutex> lock(mu);  // plans are made one at a time anyway (the tree's lock)
  std::weak_ptr<const pt::PtFile>& slot = decoded[&tag];
  if (auto kept = slot.lock()) return kept;
  std::shared_ptr<pt::PtFile> made = pt::load_pt(tag.index->model_files.at(0));
  // Its bytes are read through the view's file table: the descriptor is not kept open with the tree.
  made->file = pt::File();
  g_decodes.fetch_add(1, std::memory_order_relaxed);
  slot = made;
  std::erase_if(decoded, [](const auto& e) { return e.second.expired(); });  // tags whose plans are gone
  return made;
}

}  // namespace

uint64_t layout_source_decodes() {
  return g_decodes.load(std::memory_order_relaxed);
}

LayoutTag::LayoutTag(const MountedTag& tag, const ds::TargetLayout& target)
    : tag_(tag),
      options_(ds::source_options(*tag.index, source_model().root)),
      plan_(ds::plan_partitions(*tag.index, target, options_)) {
  for (size_t k = 0; k < tag.index->params.size(); ++k) by_name_.emplace(tag.index->params[k].name, k);
  check_module();
}

// Every entry of the source's 'module' must be one the fake can present: a trainable parameter,
// a frozen one, a buffer or a tied alias of the index. Checked before the target is served, so
// that a target is made whole or refused, never served with files that fail to build.
void LayoutTag::check_module() const {
  const ds::TagIndex& ix = *tag_.index;
  const Node* module = source_model().root->get("module");
  auto refuse = [&](const std::string& why) {
    throw Error(ix.model_files.at(0) + ": cannot present as " + ds::target_name(target()) + ": " + why, EINVAL);
  };
  if (!module || module->kind != Kind::Dict) refuse("it has no 'module' state dict to present");
  std::unordered_set<std::string> known;
  for (const auto& f : frozen()) known.insert(f.name);
  for (const auto& b : ix.buffers) known.insert(b.name);
  for (const auto& [alias, canonical] : ix.shared) known.insert(alias);
  for (const auto& [k, v] : module->entries)
    if (k->kind != Kind::Str || (!by_name_.count(k->s) && !known.count(k->s)))
      refuse("module entry '" + (k->kind == Kind::Str ? k->s : pt::repr(k)) + "' is none of the parameters, " +
             "frozen parameters and buffers the index holds" +
             (ix.parallel() ? " (frozen parameters and buffers of parallel sources are not indexed)" : ""));
}

const pt::PtFile& LayoutTag::source_model() const {
  std::call_once(loaded_, [this] { model_ = shared_source(tag_); });
  return *model_;
}

const std::vector<ds::PlainTensor>& LayoutTag::frozen() const {
  // Stage 1/2 and BF16_Optimizer sources keep every frozen param in 'module' (stage 1 and BF16
  // have no frozen_param_fragments); stage 3 only in its fragments. The index's own list: a plan
  // keeps no copy.
  const ds::TagIndex& ix = *tag_.index;
  return ix.stage == 3 || ix.module_frozen.empty() ? ix.frozen : ix.module_frozen;
}

uint64_t LayoutTag::bytes() const {
  // What this plan keeps beyond the index and the shared source pickle (shared_source): the plan's
  // vectors by capacity, and the name index (a hash node: the pair and a next pointer; a bucket).
  uint64_t n = sizeof(*this);
  for (const auto& g : plan_.groups)
    n += sizeof(g) + kept_bytes(g.params) + kept_bytes(g.offsets) + kept_bytes(g.flat) + kept_bytes(g.flat_offsets);
  for (const auto& s : plan_.sub_groups) n += sizeof(s) + kept_bytes(s.params) + kept_bytes(s.offsets);
  for (const auto& g : plan_.group_sub_groups) n += sizeof(g) + kept_bytes(g);
  n += by_name_.size() * (sizeof(decltype(by_name_)::value_type) + sizeof(void*)) +
       by_name_.bucket_count() * sizeof(void*);
  return n;
}

size_t LayoutTag::param_index(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? std::string::npos : it->second;
}

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

const pt::Node* LayoutTag::pickle(uint64_t k, pt::Arena& a) const {
  const uint64_t models = zero3() ? target().dp : 1;
  return k < models ? model_states(uint32_t(k), a) : optim_states(uint32_t(k - models), a);
}

pt::PtOptions LayoutTag::options(uint64_t k) const {
  pt::PtOptions o;
  o.prefix = stem(file_name(k));
  o.crc_source = tag_.crc_source;
  return o;
}

pt::VirtualFile LayoutTag::build(uint64_t k) const {
  pt::Arena a;
  return pt::build_pt(pickle(k, a), options(k));
}

uint64_t LayoutTag::size(uint64_t k) const {
  if (!sized()) throw Error("layouts: " + file_name(k) + " is sized by building it", EINVAL);
  const uint64_t W = target().dp;
  const size_t kind = k >= W ? 2 : k == 0 ? 0 : 1;  // optimizer files; rank 0's model file; the others
  const pt::PtOptions o = options(k);
  std::lock_guard<std::mutex> lock(sized_mu_);
  if (!records_[kind]) {
    pt::Arena a;
    records_[kind] = pt::pt_records(pickle(k, a));
  }
  // A layout depends on the names' lengths, not their letters: one per kind and length of name.
  auto [at, fresh] = sizes_.try_emplace({kind, o.prefix.size()}, 0);
  if (fresh) at->second = pt::pt_size(*records_[kind], o);
  return at->second;
}

// --- model states (plan §3) -----------------------------------------------------------------

const pt::Node* LayoutTag::model_states(uint32_t rank, pt::Arena& a) const {
  const ds::TagIndex& ix = *tag_.index;
  const ds::TargetLayout& tg = target();
  const pt::DType lp = lp_dtype(tg.precision);
  const uint64_t W = tg.dp;
  const pt::PtFile& src = source_model();

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
      module_tensors[p.name] = a.make_tensor_node(std::move(v));
    }
  }
  auto empty = [&] {
    pt::Tensor t;
    t.dtype = lp;
    t.shape = {0};
    return a.make_tensor_node(std::move(t));
  };
  if (zero3())
    for (const ds::Param& p : ix.params) module_tensors[p.name] = empty();
  std::unordered_map<std::string, const Node*> frozen_full;  // zero1/2/bf16opt: lp, full shape
  Node* frozen_fragments = ordered_dict(a);
  Node* frozen_shapes = ordered_dict(a);
  for (const ds::PlainTensor& f : frozen()) {
    const uint64_t n = f.numel(), es = pt::element_size(f.dtype);
    add(frozen_shapes, a, f.name.c_str(), torch_size(a, f.shape));
    if (zero3()) {
      module_tensors[f.name] = empty();
      const uint64_t part = ds::zero3_partition(n, W), valid = ds::valid_on_rank(n, part, rank);
      pt::Tensor t;
      t.dtype = lp;
      t.shape = {int64_t(part)};
      Fill fill{t};
      fill.values(plain_bytes(tag_, f, part * rank * es, valid * es), f.dtype, valid);
      fill.zero((part - valid) * pt::element_size(lp));
      add(frozen_fragments, a, f.name.c_str(), a.make_tensor_node(std::move(t)));
      continue;
    }
    pt::Tensor t;
    t.dtype = lp;
    t.shape = f.shape;
    Fill{t}.values(plain_bytes(tag_, f, 0, n * es), f.dtype, n);
    const Node* node = a.make_tensor_node(std::move(t));
    module_tensors[f.name] = frozen_full[f.name] = node;
    add(frozen_fragments, a, f.name.c_str(), node);  // zero2 shares the module's storage
  }
  // Each ZeRO-3 rank keeps its own buffers: at the source's DP size rank r gets rank r's; at any
  // other, no target rank is a source rank, and every file gets rank 0's (as ZeRO-1/2 files do).
  const bool own_buffers = zero3() && W == uint64_t(ix.dp) && rank < ix.rank_buffers.size();
  for (const ds::PlainTensor& b : own_buffers ? ix.rank_buffers[rank] : ix.buffers) {
    pt::Tensor t;
    t.dtype = b.dtype;
    t.shape = b.shape;
    Fill{t}.values(plain_bytes(tag_, b, 0, b.numel() * pt::element_size(b.dtype)), b.dtype, b.numel());
    module_tensors[b.name] = a.make_tensor_node(std::move(t));
  }
  for (const auto& [alias, canonical] : ix.shared)
    if (auto it = module_tensors.find(canonical); it != module_tensors.end()) module_tensors[alias] = it->second;

  const Node* src_module = src.root->get("module");  // check_module() said it holds only these
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

  Node* shapes = pt::build::list(a, {});
  auto shape_dict = [&](const std::vector<uint32_t>& params) {
    Node* d = ordered_dict(a);
    for (uint32_t k : params) add(d, a, ix.params[k].name.c_str(), torch_size(a, ix.params[k].shape));
    shapes->items.push_back(d);
  };
  for (const ds::FlatGroup& g : plan_.groups) shape_dict(g.flat);
  for (const ds::SubGroup& s : plan_.sub_groups) shape_dict(s.params);

  Node* parallel_dimensions = pt::build::dict(a);
  add(parallel_dimensions, a, "pp_degree", a.make_int(1));
  add(parallel_dimensions, a, "tp_degree", a.make_int(1));
  const bool keeps_frozen = tg.stage == ds::TargetStage::Zero2 || zero3();
  Node* root = pt::build::dict(a);
  for (const auto& [k, v] : src.root->entries) {
    const std::string_view key = k->kind == Kind::Str ? std::string_view(k->s) : std::string_view();
    const Node* out = v;
    if (key == "module")
      out = module;
    else if (key == "param_shapes")
      out = shapes;
    else if (key == "frozen_param_shapes")
      out = keeps_frozen ? frozen_shapes : pt::build::none(a);
    else if (key == "frozen_param_fragments")
      out = keeps_frozen ? frozen_fragments : pt::build::none(a);
    else if (key == "shared_params" && zero3() && rank != 0)
      out = pt::build::dict(a);
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

// The optimizer-state files are DeepSpeed's schemas (ds/optim_file.h), over this view's files.
const pt::Node* LayoutTag::optim_states(uint32_t rank, pt::Arena& a) const {
  const ds::OptimSource src{*tag_.index, plan_, options_, source_model().root,
                            [this](const pt::Extent& e) { return tag_.map(e); }};
  return ds::optim_states_pickle(a, src, rank);
}

}  // namespace zm::view
