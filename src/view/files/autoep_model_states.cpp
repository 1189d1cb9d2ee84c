// The model-state files of an AutoEP universal checkpoint. ds_to_universal.py does not copy them:
// it torch.load()s each one, sets universal_checkpoint_info['expert_parameter_patterns'] and
// ['ds_autoep_layers'], and torch.save()s the result (spec tensor-pipeline-expert.md §8). Copying
// the source pickle's nodes keeps the objects it shared shared, so the writer memoizes as
// torch.save's pickler did; tensors become views of their source storages, served from the file.
#include <unordered_map>

#include "zeromount/pt/build.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/view/files/universal.h"

namespace zm::view {

using pt::Kind;
using pt::Node;

namespace {

// What the re-save keeps and what it makes anew: the source's tensors become views of their
// storages in the source file (one storage record per source storage); scalars, strings and
// globals are the source's own nodes, so that the writer memoizes them as torch.save did.
class Resave {
 public:
  Resave(pt::Arena& a, uint32_t file, const std::string& path) : a_(a), file_(file), path_(path) {}

  // For pt::Copier: a node to use instead of a copy, or nullptr to copy it.
  const Node* instead(const Node* n) {
    if (auto it = replaced_.find(n); it != replaced_.end()) return it->second;
    switch (n->kind) {
      case Kind::List:
      case Kind::Tuple:
      case Kind::Dict:
      case Kind::Set:
      case Kind::Object:
        return nullptr;
      case Kind::Tensor:
        return tensor(n->tensor);
      case Kind::Storage:
        throw Error(path_ + ": a bare storage in the model state cannot be re-saved", EIO);
      default:
        return n;
    }
  }
  // `from` is replaced by `to` wherever the source refers to it (a Python object mutated in place).
  void replace(const Node* from, const Node* to) { replaced_[from] = to; }

 private:
  // A view of its storage's bytes in the source file; one storage record per source storage.
  Node* tensor(const pt::Tensor* t) {
    if (t->attrs || !t->contiguous())
      throw Error(path_ + ": a non-contiguous or subclassed tensor in the model state cannot be re-saved", EIO);
    auto [it, fresh] = storages_.try_emplace(t->storage_key, nullptr);
    if (fresh) {
      pt::Tensor s;
      s.dtype = t->dtype;
      s.shape = {int64_t(t->storage_numel)};
      if (t->storage_numel) s.data.push_back({file_, t->record_offset, t->storage_numel * pt::element_size(t->dtype)});
      it->second = a_.make_tensor(std::move(s));
    }
    pt::Tensor v;
    v.dtype = t->dtype;
    v.shape = t->shape;
    v.storage_of = it->second;
    v.storage_offset = t->storage_offset;
    v.requires_grad = t->requires_grad;
    return a_.make_tensor_node(std::move(v));
  }

  pt::Arena& a_;
  uint32_t file_;
  const std::string& path_;
  std::unordered_map<const Node*, const Node*> replaced_;
  std::unordered_map<std::string, const pt::Tensor*> storages_;
};

}  // namespace

pt::VirtualFile autoep_model_states_file(const MountedTag& t, const std::string& path) {
  const ds::TagIndex& ix = *t.index;
  size_t shard = 0;
  while (shard < ix.shards.size() && ix.shards[shard].path != path) ++shard;
  if (shard == ix.shards.size()) throw Error(path + ": not among the indexed shards", EIO);
  const auto src = pt::load_pt(path);
  if (src->pickle_hash != ix.shards[shard].pickle_hash)
    throw Error(path + ": changed since it was indexed (remount)", ESTALE);
  const pt::Extent whole = t.map({uint32_t(shard), 0, 0});
  pt::Arena a;
  Resave r(a, whole.file, path);
  pt::Copier copy(a, [&r](const Node* n) { return r.instead(n); });
  const Node* info = src->root->get("universal_checkpoint_info");
  if (!info || info->kind != Kind::Dict) throw Error(path + ": no universal_checkpoint_info dict to update", EIO);
  Node* uc = info->ordered ? pt::build::ordered_dict(a) : pt::build::dict(a);
  r.replace(info, uc);
  for (const auto& [k, v] : info->entries) uc->entries.emplace_back(copy(k), copy(v));
  pt::build::assign(uc, a, "expert_parameter_patterns", pt::build::str_list(a, {"\\.experts\\.w[123]$"}));
  pt::build::assign(uc, a, "ds_autoep_layers", ix.autoep_layers);
  pt::PtOptions o;
  o.prefix = path.substr(path.find_last_of('/') + 1);
  o.prefix = o.prefix.substr(0, o.prefix.size() - 3);  // torch.save names the archive after the file's stem
  o.crc_source = t.crc_source;
  return pt::build_pt(copy(src->root), o);
}

}  // namespace zm::view
