#pragma once
// A parallel parameter's universal tensor described from its tensor-parallel slices
// (TagIndex::parallel()): the run generator of its merge, and its bytes as source extents
// whenever the merge only moves bytes.
#include <optional>
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/tp_merge.h"

namespace zm::ds {

// Rules Cat, TwoSubParams and SubParams (the merge before any vocabulary cut).
TpCat tp_cat_of(const TagIndex& ix, const Param& p);
// The whole merged state (Param::merged_numel elements: the storage of a vocabulary tensor) as
// extents; nullopt for an averaged parameter, whose bytes must be computed. Replicated: slice 0.
std::optional<std::vector<pt::Extent>> merged_extents(const TagIndex& ix, const Param& p, size_t state);

}  // namespace zm::ds
