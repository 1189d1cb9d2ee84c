#pragma once
// Opens the shards of one tag, records each one's identity and turns tensor slices into extents,
// checking every slice against the tensor it is cut from.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeromount/ds/field.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/pt_file.h"

namespace zm::ds {

struct OpenShard {
  std::unique_ptr<pt::PtFile> pt;
  uint32_t id = 0;  // its index in TagIndex::shards
  Field root() const { return Field(pt->root, name); }
  std::string name;  // the file's path, for messages
};

class ShardSet {
 public:
  explicit ShardSet(TagIndex& index) : index_(index) {}
  OpenShard open(const std::string& path);
  // `path` read as `like`'s values (pt::load_pt_like) when its pickle is like's byte for byte and
  // it keeps each of `used` (tensors of like's values) at the same bytes; nullopt otherwise, and
  // nothing is recorded: the caller then opens it on its own.
  std::optional<OpenShard> open_like(const std::string& path, const OpenShard& like,
                                     const std::vector<const pt::Tensor*>& used);

  // Elements [first, first + count) of a 1-D view of `t`, as bytes of shard `shard`.
  // `what` names the parameter in the error when the slice runs past the tensor.
  static pt::Extent slice(const Field& tensor, uint32_t shard, uint64_t first, uint64_t count, const std::string& what);

 private:
  OpenShard add(std::unique_ptr<pt::PtFile> pt, const std::string& path);  // records its identity
  TagIndex& index_;
};

}  // namespace zm::ds
