#include "zeromount/ds/dcp_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "zeromount/pt/dcp_item.h"
#include "zeromount/pt/dcp_keys.h"
#include "zeromount/pt/dcp_read.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/file.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/text.h"

namespace zm::ds {

namespace dcp = pt::dcp;
namespace fs = std::filesystem;

namespace {

// Accelerate's save_fsdp_model / save_fsdp_optimizer folder names (SHARDED_STATE_DICT).
constexpr const char* kModelFolder = "pytorch_model_fsdp_0";
constexpr const char* kOptimizerFolder = "optimizer_0";
// torchtitan's CheckpointManager key of the scheduler's state_dict; the Trainer's file beside the folders.
constexpr const char* kSchedulerPrefix = "lr_scheduler.";
constexpr const char* kSchedulerFile = "scheduler.pt";

bool holds_metadata(const Dir& d) {
  struct stat st {};
  return d.ok() && d.stat(".metadata", st) && S_ISREG(st.st_mode);
}

// A key of one of the tag's DCP folders.
struct KeyRef {
  size_t folder = 0;
  const dcp::StoredKey* key = nullptr;
};

// A value's identity, for torchtitan's groups: parameters whose hyper-parameters are equal.
std::string value_key(const pt::Node* n) {
  if (!n) return "?";
  switch (n->kind) {
    case pt::Kind::Float:
      return "f" + pt::format_double(n->f);
    case pt::Kind::Int:
      return "i" + std::to_string(n->i);
    case pt::Kind::Bool:
      return n->b ? "T" : "F";
    case pt::Kind::None:
      return "N";
    case pt::Kind::Str:
      return "s" + pt::json_escape(n->s);
    case pt::Kind::Tuple:
    case pt::Kind::List: {
      std::string s = "(";
      for (const pt::Node* i : n->items) s += value_key(i) + ",";
      return s + ")";
    }
    default:
      return pt::repr(n, 4);
  }
}

class DcpIndexer {
 public:
  explicit DcpIndexer(TagIndex& ix) : ix_(ix) {}

  void run() {
    read_folders();
    classify();
    if (states_.empty() && groups_.empty() && titan_hypers_.empty())
      model_only();
    else
      with_optimizer();
  }

 private:
  void read_folders() {
    const Dir dir = open_dir(ix_.dir);
    if (holds_metadata(dir)) {
      folders_.push_back(ix_.dir);
    } else {
      folders_.push_back(ix_.dir + "/" + kModelFolder);
      if (holds_metadata(dir.open(kOptimizerFolder))) folders_.push_back(ix_.dir + "/" + kOptimizerFolder);
      ix_.source_style = "hf-fsdp";
    }
    for (const std::string& f : folders_) {
      md_.push_back(dcp::read_metadata(pt::File(f + "/.metadata")));
      dcp::check_folder(md_.back(), f);
    }
    if (ix_.source_style.empty()) ix_.source_style = std::string(dcp::style_name(dcp::style_of(md_[0])));
  }

  [[noreturn]] void refuse(const KeyRef& k, const std::string& why) const {
    throw Error(where(md_.at(k.folder).path, "key '" + k.key->fqn + "': " + why), ENOTSUP);
  }

  void classify() {
    for (size_t f = 0; f < md_.size(); ++f)
      for (const dcp::StoredKey& k : md_[f].keys) {
        const dcp::KeyRole role = dcp::key_role(k);
        const KeyRef ref{f, &k};
        switch (role.family) {
          case dcp::Family::Model:
            if (model_.emplace(role.param, ref).second) model_order_.push_back(role.param);
            break;
          case dcp::Family::OptimizerState:
            states_[role.param].emplace_back(role.name, ref);
            break;
          case dcp::Family::ParamGroup:
            if (role.group)
              groups_[*role.group].emplace_back(role.name, ref);
            else
              titan_hypers_[role.param].emplace_back(role.name, ref);
            break;
          case dcp::Family::Other:  // torchtitan's train_state, lr_scheduler, dataloader: not a tensor state
            if (k.fqn.rfind(kSchedulerPrefix, 0) == 0 && !k.tensor) scheduler_.push_back(ref);
            break;
        }
      }
    if (model_.empty()) throw Error(where(md_[0].path, "no model keys: not a model's training state"), ENOTSUP);
  }

  // Where a data file of folder `f` is in ix.shards, added on first use.
  uint32_t shard(size_t f, const std::string& relative) {
    const std::string path = folders_.at(f) + "/" + relative;
    if (auto it = shard_of_.find(path); it != shard_of_.end()) return it->second;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(where(path, "cannot stat"), errno);
    ix_.shards.push_back({path, uint64_t(st.st_size), pt::mtime_ns(st), uint64_t(st.st_ino), 0});
    files_.push_back(std::make_unique<pt::File>(path));
    return shard_of_[path] = uint32_t(ix_.shards.size() - 1);
  }

  // A tensor key's chunks as runs of its flat elements, in element order: chunks cut at dim 0
  // only (each a run of whole rows); the reader checked that they cover it once.
  std::vector<Fragment> fragments(const KeyRef& k) {
    const dcp::StoredKey& key = *k.key;
    if (!key.tensor) refuse(k, "a bytes item where a tensor was expected");
    std::vector<const dcp::StoredChunk*> chunks;
    for (const dcp::StoredChunk& c : key.chunks) {
      for (size_t d = 1; d < key.size.size(); ++d)
        if (c.offsets[d] != 0 || c.sizes[d] != key.size[d])
          refuse(k, "its chunks are cut at dim " + std::to_string(d) +
                        " (tensor parallel or _StridedShard), which is not served yet");
      chunks.push_back(&c);
    }
    std::sort(chunks.begin(), chunks.end(),
              [](auto* a, auto* b) { return !a->offsets.empty() && a->offsets[0] < b->offsets[0]; });
    const uint64_t row = key.size.empty() ? 1 : pt::numel(std::vector<int64_t>(key.size.begin() + 1, key.size.end()));
    std::vector<Fragment> out;
    for (const dcp::StoredChunk* c : chunks) {
      const uint64_t numel = pt::numel(c->sizes);
      if (numel == 0) continue;
      const uint32_t s = shard(k.folder, c->storage.relative_path);
      const dcp::ChunkBytes at = dcp::chunk_bytes(*files_[s], key, *c);
      const uint64_t first = c->offsets.empty() ? 0 : uint64_t(c->offsets[0]) * row;
      out.push_back({uint32_t(out.size()), first, numel, {s, at.offset, at.length}});
    }
    return out;
  }

  std::vector<pt::Extent> extents(const KeyRef& k) {
    std::vector<pt::Extent> out;
    for (const Fragment& f : fragments(k)) out.push_back(f.extent);
    return out;
  }

  const pt::Node* value(const KeyRef& k) {
    const dcp::StoredKey& key = *k.key;
    if (key.tensor || key.chunks.size() != 1) refuse(k, "a tensor where a value was expected");
    const uint32_t s = shard(k.folder, key.chunks[0].storage.relative_path);
    return dcp::item_value(*files_[s], key, ix_.arena);
  }

  // The rank count of the save: how many data files its model keys name.
  int world() {
    std::map<std::string, bool> files;
    for (const auto& [name, ref] : model_)
      for (const auto& c : ref.key->chunks) files[c.storage.relative_path] = true;
    return int(std::max<size_t>(files.size(), 1));
  }

  Param& add_param(const std::string& name, int group) {
    const auto it = model_.find(name);
    if (it == model_.end())
      throw Error(where(md_.back().path, "optimizer state for '" + name + "', which the model keys do not hold"),
                  ENOTSUP);
    const dcp::StoredKey& key = *it->second.key;
    if (ix_.params.empty()) ix_.master_dtype = ix_.module_dtype = key.dtype;
    if (key.dtype != ix_.master_dtype)
      refuse(it->second, std::string("is ") + std::string(pt::dtype_name(key.dtype)) +
                             " where the parameters before it are " + std::string(pt::dtype_name(ix_.master_dtype)));
    Param p;
    p.name = name;
    p.shape = key.size;
    p.numel = pt::numel(key.size);
    p.group = group;
    p.stored.push_back(fragments(it->second));
    trainable_.insert(name);
    ix_.params.push_back(std::move(p));
    return ix_.params.back();
  }

  void model_only() {
    ix_.optimizer_saved = false;
    ix_.source_style = "model-only";
    ix_.state_names = {"fp32"};
    ix_.num_groups = 1;
    for (const std::string& n : model_order_) add_param(n, 0);
    finish();
  }

  // The optimizer's groups, each its hyper-parameters and its parameters in order.
  struct Group {
    std::vector<std::pair<std::string, const pt::Node*>> hypers;
    std::vector<std::string> params;
  };

  std::vector<Group> torch_groups() {
    std::vector<Group> out;
    for (const auto& [g, keys] : groups_) {
      Group group;
      bool listed = false;
      for (const auto& [name, ref] : keys) {
        const pt::Node* v = value(ref);
        if (name != "params") {
          group.hypers.emplace_back(name, v);
          continue;
        }
        if (!v->is(pt::Kind::List)) refuse(ref, "holds " + pt::repr(v) + ", not a list of parameter names");
        for (const pt::Node* n : v->items) {
          if (!n->is(pt::Kind::Str)) refuse(ref, "holds " + pt::repr(n) + " where a parameter name goes");
          group.params.push_back(n->s);
        }
        listed = true;
      }
      if (!listed)
        throw Error(where(md_.back().path, "param group " + std::to_string(g) + " has no 'params' list"), ENOTSUP);
      out.push_back(std::move(group));
    }
    return out;
  }

  // torchtitan keeps every hyper-parameter per parameter and no `params` lists: a group is the
  // parameters with equal hyper-parameters, in the model's order.
  std::vector<Group> titan_groups() {
    std::vector<Group> out;
    std::map<std::string, size_t> by_values;
    for (const std::string& n : model_order_) {
      const auto it = titan_hypers_.find(n);
      if (it == titan_hypers_.end()) continue;
      Group g;
      std::string sig;
      for (const auto& [name, ref] : it->second) {
        g.hypers.emplace_back(name, value(ref));
        sig += name + "=" + value_key(g.hypers.back().second) + ";";
      }
      auto [at, fresh] = by_values.try_emplace(sig, out.size());
      if (fresh) out.push_back(std::move(g));
      out[at->second].params.push_back(n);
    }
    return out;
  }

  void with_optimizer() {
    const std::vector<Group> groups = groups_.empty() ? titan_groups() : torch_groups();
    // The states partitioned like the weights (exp_avg, ...) and the per-parameter values ('step').
    ix_.state_names = {"fp32"};
    for (const Group& g : groups)
      for (const std::string& n : g.params)
        for (const auto& [name, ref] : states_[n]) {
          const bool whole = ref.key->tensor && ref.key->size == model_.at(n).key->size && !ref.key->size.empty();
          auto& names = whole ? ix_.state_names : ix_.scalar_names;
          if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
        }
    pt::Node* param_groups = ix_.arena.make(pt::Kind::List);
    int64_t next_id = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      std::vector<std::optional<KeyRef>> first_scalar(ix_.scalar_names.size());
      pt::Node* group = ix_.arena.make(pt::Kind::Dict);
      for (const auto& [name, v] : groups[g].hypers) group->entries.emplace_back(ix_.arena.make_str(name), v);
      pt::Node* ids = ix_.arena.make(pt::Kind::List);
      for (const std::string& n : groups[g].params) {
        Param& p = add_param(n, int(g));
        ids->items.push_back(ix_.arena.make_int(next_id++));
        const auto& kept = states_[n];
        const auto state = [&](const std::string& name) -> const KeyRef* {
          for (const auto& [k, ref] : kept)
            if (k == name) return &ref;
          return nullptr;
        };
        for (size_t k = 1; k < ix_.state_names.size(); ++k) {
          const KeyRef* ref = state(ix_.state_names[k]);
          if (!ref)
            throw Error(
                where(md_.back().path, "'" + n + "' has no " + ix_.state_names[k] + " where other parameters do"),
                ENOTSUP);
          if (ref->key->dtype != ix_.master_dtype || ref->key->size != p.shape)
            refuse(*ref, "is not of its parameter's dtype and shape");
          p.stored.push_back(fragments(*ref));
        }
        for (size_t k = 0; k < ix_.scalar_names.size(); ++k)
          if (const KeyRef* ref = state(ix_.scalar_names[k])) same_in_group(g, k, *ref, first_scalar[k]);
        p.step = int(g);
      }
      group->entries.emplace_back(ix_.arena.make_str("params"), ids);
      param_groups->items.push_back(group);
    }
    ix_.param_groups = param_groups;
    ix_.num_groups = int(groups.size());
    finish();
  }

  // A group's per-parameter values ('step') are one value for the group, as DeepSpeed keeps them:
  // every parameter's must be the first's, byte for byte.
  void same_in_group(size_t g, size_t k, const KeyRef& ref, std::optional<KeyRef>& first) {
    if (ix_.scalars.size() <= g) ix_.scalars.resize(g + 1, std::vector<StepValue>(ix_.scalar_names.size()));
    const dcp::StoredKey& key = *ref.key;
    if (!key.tensor || pt::numel(key.size) != 1) refuse(ref, "is not a one-element tensor ('step' is)");
    const std::vector<pt::Extent> at = extents(ref);
    if (!first) {
      first = ref;
      ix_.scalars[g][k] = StepValue{StepValue::Tensor, key.dtype, key.size, at.at(0), 0, 0};
      return;
    }
    const pt::Extent& was = ix_.scalars[g][k].extent;
    std::string a(was.length, '\0'), b(at.at(0).length, '\0');
    files_[was.file]->read_exact(was.offset, a.data(), a.size(), "a group's step");
    files_[at[0].file]->read_exact(at[0].offset, b.data(), b.size(), "a group's step");
    if (a != b || key.dtype != ix_.scalars[g][k].dtype)
      refuse(ref, "differs from '" + first->key->fqn + "' in the same param group: one optimizer step per group");
  }

  // A model key the optimizer does not hold is a frozen parameter or a buffer. FSDP2 shards every
  // parameter (Shard(0): one chunk per rank) and keeps buffers whole (one chunk, written once): a
  // key of several chunks is a frozen parameter, a key of one chunk a buffer. A save at W = 1
  // cuts nothing, and its frozen parameters read as buffers.
  void finish() {
    for (const std::string& n : model_order_)
      if (!trainable_.count(n)) {
        const KeyRef& ref = model_.at(n);
        PlainTensor t{n, ref.key->dtype, ref.key->size, extents(ref)};
        if (ref.key->chunks.size() > 1) {
          ix_.frozen.push_back(t);
          ix_.module_frozen.push_back(std::move(t));
        } else {
          ix_.buffers.push_back(std::move(t));
        }
      }
    ix_.dp = world();
    ix_.step_kind = ix_.scalar_names.empty() ? StepValue::None : StepValue::Tensor;
    read_scheduler();
  }

  // The run's scheduler state, where the source keeps one: torchtitan's `lr_scheduler.<key>` items,
  // or the Trainer's scheduler.pt beside its folders (torch.save of the scheduler's state_dict).
  void read_scheduler() {
    if (!scheduler_.empty()) {
      pt::Node* d = ix_.arena.make(pt::Kind::Dict);
      for (const KeyRef& ref : scheduler_)
        d->entries.emplace_back(ix_.arena.make_str(ref.key->fqn.substr(std::string_view(kSchedulerPrefix).size())),
                                value(ref));
      ix_.lr_scheduler = d;
      return;
    }
    const std::string path = ix_.dir + "/" + kSchedulerFile;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    const auto file = pt::load_pt(path);
    if (!file->root || file->root->kind != pt::Kind::Dict)
      throw Error(where(path, "holds " + pt::repr(file->root) + ", not a scheduler's state_dict"), ENOTSUP);
    ix_.lr_scheduler = pt::Copier(ix_.arena)(file->root);
  }

  TagIndex& ix_;
  std::vector<std::string> folders_;
  std::vector<dcp::ReadMetadata> md_;
  std::map<std::string, KeyRef> model_;
  std::vector<std::string> model_order_;
  std::map<std::string, std::vector<std::pair<std::string, KeyRef>>> states_;
  std::map<int64_t, std::vector<std::pair<std::string, KeyRef>>> groups_;
  std::map<std::string, std::vector<std::pair<std::string, KeyRef>>> titan_hypers_;
  std::set<std::string> trainable_;
  std::vector<KeyRef> scheduler_;
  std::map<std::string, uint32_t> shard_of_;
  std::vector<std::unique_ptr<pt::File>> files_;
};

}  // namespace

bool is_dcp_tag(const Dir& dir) {
  return holds_metadata(dir) || (dir.ok() && holds_metadata(dir.open(kModelFolder)));
}

std::unique_ptr<TagIndex> index_dcp(const std::string& tag_dir) {
  auto ix = std::make_unique<TagIndex>();
  ix->dir = fs::absolute(tag_dir).lexically_normal().string();
  ix->tag = fs::path(ix->dir).filename().string();
  ix->source = SourceKind::Dcp;
  ix->stage = 0;
  DcpIndexer(*ix).run();
  return ix;
}

}  // namespace zm::ds
