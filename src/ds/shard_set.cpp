#include "zeromount/ds/shard_set.h"

#include "zeromount/pt/error.h"

namespace zm::ds {

OpenShard ShardSet::open(const std::string& path) {
  return add(pt::load_pt(path), path);
}

std::optional<OpenShard> ShardSet::open_like(const std::string& path, const OpenShard& like,
                                             const std::vector<const pt::Tensor*>& used) {
  std::unique_ptr<pt::PtFile> pt = pt::load_pt_like(path, *like.pt);
  if (!pt) return std::nullopt;
  for (const pt::Tensor* t : used)
    if (!pt->same_record(*t)) return std::nullopt;
  return add(std::move(pt), path);
}

OpenShard ShardSet::add(std::unique_ptr<pt::PtFile> pt, const std::string& path) {
  OpenShard s;
  s.pt = std::move(pt);
  const struct stat& st = s.pt->file.stat();
  Shard shard;
  shard.path = path;
  shard.size = uint64_t(st.st_size);
  shard.mtime_ns = pt::mtime_ns(st);
  shard.inode = uint64_t(st.st_ino);
  shard.pickle_hash = s.pt->pickle_hash;
  s.id = uint32_t(index_.shards.size());
  index_.shards.push_back(std::move(shard));
  s.name = path;
  return s;
}

pt::Extent ShardSet::slice(const Field& tensor, uint32_t shard, uint64_t first, uint64_t count,
                           const std::string& what) {
  const pt::Tensor& t = tensor.as_tensor();
  if (!t.contiguous()) tensor.fail(what + ": tensor is not contiguous");
  const uint64_t n = t.numel();
  if (first > n || count > n - first)
    tensor.fail(what + ": start (" + std::to_string(first) + ") + length (" + std::to_string(count) +
                ") exceeds the tensor's " + std::to_string(n) + " elements");
  const uint64_t es = pt::element_size(t.dtype);
  return pt::Extent{shard, t.byte_offset() + first * es, count * es};
}

}  // namespace zm::ds
