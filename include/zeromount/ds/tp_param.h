#pragma once
// A parallel parameter's universal tensor described from its tensor-parallel slices
// (TagIndex::parallel()): the run generator of its merge, and its bytes as source extents
// whenever the merge only moves bytes.
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/tp_merge.h"

namespace zm::ds {

// Rules Cat, TwoSubParams and SubParams (the merge before any vocabulary cut).
TpCat tp_cat_of(const TagIndex& ix, const Param& p);
// merged_extents (tag_index.h), the bytes of a merge that only moves them, is defined with it.

}  // namespace zm::ds
