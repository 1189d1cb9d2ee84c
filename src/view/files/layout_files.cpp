// A faked layout of one tag: its plan, its file names and its model-state files, rank by rank
// ([layouts §2] lists every key, in order).
#include "zeromount/view/files/layout_files.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zeromount/ds/model_file.h"
#include "zeromount/ds/model_root.h"
#include "zeromount/ds/optim_file.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/pt/value.h"
#include "zeromount/view/memo.h"
#include "zeromount/view/mounted_tag.h"

// The pieces the faked layout files are made of: tensors assembled from source extents, zero fill and
// computed bytes, and the pickle values DeepSpeed's files hold.
namespace zm::view {

namespace {

using pt::Kind;
using pt::Node;

// --- pickle values --------------------------------------------------------------------------

std::string stem(const std::string& name) {
  return std::filesystem::path(name).stem().string();
}

std::string optim_prefix(const ds::TargetLayout& t) {
  return t.stage == ds::TargetStage::Bf16Opt || t.precision == ds::Precision::Bf16 ? "bf16_" : "";
}

// Stage 1/2 and BF16_Optimizer sources keep every frozen param in 'module' (stage 1 and BF16
// have no frozen_param_fragments); stage 3 only in its fragments. The index's own list: a plan
// keeps no copy.
const std::vector<ds::PlainTensor>& frozen_of(const ds::TagIndex& ix) {
  return ix.stage == 3 || ix.module_frozen.empty() ? ix.frozen : ix.module_frozen;
}

// The skeleton of a tag's model-state pickle, one per tag however many of its targets have plans:
// the plans share it, and it is let go with the last of them. The decoded pickle itself is let go
// once the skeleton is made (8 plans of a 20,000-parameter tag holding 8 decoded copies took 90
// MiB each; one shared copy still took 93). The map holds only weak references, one per tag.
std::atomic<uint64_t> g_decodes{0};

std::shared_ptr<const ds::ModelSkeleton> shared_source(const MountedTag& tag) {
  static std::mutex mu;
  static std::map<const MountedTag*, std::weak_ptr<const ds::ModelSkeleton>> made;
  std::lock_guard<std::mutex> lock(mu);  // plans are made one at a time anyway (the tree's lock)
  std::weak_ptr<const ds::ModelSkeleton>& slot = made[&tag];
  if (auto kept = slot.lock()) return kept;
  std::shared_ptr<const ds::ModelSkeleton> skeleton;
  {
    const std::shared_ptr<const pt::Node> root = ds::model_root(*tag.index);  // DeepSpeed's, or made up
    skeleton = ds::model_skeleton(*tag.index, frozen_of(*tag.index), root.get());
  }
  g_decodes.fetch_add(1, std::memory_order_relaxed);
  slot = skeleton;
  std::erase_if(made, [](const auto& e) { return e.second.expired(); });  // tags whose plans are gone
  return skeleton;
}

}  // namespace

uint64_t layout_source_decodes() {
  return g_decodes.load(std::memory_order_relaxed);
}

namespace {

// A source without DeepSpeed's model-state files is refused before one is looked for.
const MountedTag& native_source(const MountedTag& tag, const ds::TargetLayout& target) {
  if (const std::string why = ds::native_layout_refusal(*tag.index); !why.empty())
    throw Error(tag.index->dir + ": cannot present as " + ds::target_name(target) + ": " + why, EINVAL);
  return tag;
}

}  // namespace

LayoutTag::LayoutTag(const MountedTag& tag, const ds::TargetLayout& target)
    : tag_(native_source(tag, target)),
      options_(ds::source_options(*tag.index, source_model().root)),
      plan_(ds::plan_partitions(*tag.index, target, options_)) {
  check_module();
}

// Every entry of the source's 'module' must be one the fake can present: a trainable parameter,
// a frozen one, a buffer or a tied alias of the index (ds::model_skeleton checks). Checked before
// the target is served, so that a target is made whole or refused, never served with files that
// fail to build.
void LayoutTag::check_module() const {
  if (const std::string& why = source_model().refusal; !why.empty())
    throw Error(tag_.index->dir + ": cannot present as " + ds::target_name(target()) + ": " + why, EINVAL);
}

const ds::ModelSkeleton& LayoutTag::source_model() const {
  std::call_once(loaded_, [this] { model_ = shared_source(tag_); });
  return *model_;
}

const std::vector<ds::PlainTensor>& LayoutTag::frozen() const {
  return frozen_of(*tag_.index);
}

uint64_t LayoutTag::bytes() const {
  // What this plan keeps beyond the index and the tag's shared skeleton (shared_source): the
  // plan's vectors by capacity.
  uint64_t n = sizeof(*this);
  for (const auto& g : plan_.groups)
    n += sizeof(g) + kept_bytes(g.params) + kept_bytes(g.offsets) + kept_bytes(g.flat) + kept_bytes(g.flat_offsets);
  for (const auto& s : plan_.sub_groups) n += sizeof(s) + kept_bytes(s.params) + kept_bytes(s.offsets);
  for (const auto& g : plan_.group_sub_groups) n += sizeof(g) + kept_bytes(g);
  return n;
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
  return tag_.pt_options(stem(file_name(k)));
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

// --- model states [layouts §2.1] -----------------------------------------------------------

const pt::Node* LayoutTag::model_states(uint32_t rank, pt::Arena& a) const {
  source_model();
  return ds::model_states_pickle(a, {*tag_.index, plan_, *model_, frozen(), tag_.mapper()}, rank);
}

// The optimizer-state files are DeepSpeed's schemas (ds/optim_file.h), over this view's files.
const pt::Node* LayoutTag::optim_states(uint32_t rank, pt::Arena& a) const {
  const ds::OptimSource src{*tag_.index, plan_, options_, source_model().root, tag_.mapper()};
  return ds::optim_states_pickle(a, src, rank);
}

}  // namespace zm::view
