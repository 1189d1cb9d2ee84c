#pragma once
// One parameter's state as bytes of the shards, for every made-up file that holds its values
// (universal, weights, DCP, browse, statistics, the torch layouts): the fragments of a
// data-parallel checkpoint in rank order, the merge of a tensor-parallel one (extents where the
// merge only moves bytes, computed pieces where it averages or interleaves).
#include <cstddef>
#include <functional>

#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/value.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::ds {

// Where a shard extent of the index is read from (the view maps shard ids to its file table).
using ExtentMap = std::function<pt::Extent(const pt::Extent&)>;

// The storage of `p`'s state `state` (its universal tensor) appended to `out`'s bytes: the whole
// merged storage of a parallel parameter, Param::merged_numel elements (a vocabulary tensor keeps
// its padding [tp §10.3]).
void state_bytes(const TagIndex& ix, const Param& p, size_t state, const ExtentMap& map, pt::Tensor& out);
// The same cut to p.shape (p.numel elements: a vocabulary cut is a prefix), appended to `f`.
void state_bytes(const TagIndex& ix, const Param& p, size_t state, const ExtentMap& map, pt::VirtualFile& f);

// A per-group value ('step', ...) as the source stored it: a tensor (its own storage, read through
// `map`), an int, a float or None.
const pt::Node* step_value_node(pt::Arena& a, const StepValue& v, const ExtentMap& map);

}  // namespace zm::ds
