#include "zeromount/ds/autoep_model_file.h"

#include <string>
#include <unordered_map>

#include "zeromount/pt/build.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

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
    const pt::StorageRecord& r = t->record();
    auto [it, fresh] = storages_.try_emplace(r.key, nullptr);
    if (fresh) {
      pt::Tensor s;
      s.dtype = t->dtype;
      s.shape = {int64_t(r.numel)};
      s.bytes().append_extent({file_, r.offset, r.numel * pt::element_size(t->dtype)});
      it->second = a_.make_tensor(std::move(s));
    }
    pt::Tensor v;
    v.dtype = t->dtype;
    v.shape = t->shape;
    v.made().storage_of = it->second;
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

const Node* autoep_model_states_pickle(pt::Arena& a, const TagIndex& ix, size_t shard, const Node* source_root,
                                       const ExtentMap& map) {
  const std::string& path = ix.shards.at(shard).path;
  Resave r(a, map({uint32_t(shard), 0, 0}).file, path);
  pt::Copier copy(a, [&r](const Node* n) { return r.instead(n); });
  const Node* info = source_root->get("universal_checkpoint_info");
  if (!info || info->kind != Kind::Dict) throw Error(path + ": no universal_checkpoint_info dict to update", EIO);
  Node* uc = info->ordered ? pt::build::ordered_dict(a) : pt::build::dict(a);
  r.replace(info, uc);
  for (const auto& [k, v] : info->entries) uc->entries.emplace_back(copy(k), copy(v));
  pt::build::assign(uc, a, "expert_parameter_patterns", pt::build::str_list(a, {"\\.experts\\.w[123]$"}));
  pt::build::assign(uc, a, "ds_autoep_layers", ix.autoep_layers);
  return copy(source_root);
}

}  // namespace zm::ds
