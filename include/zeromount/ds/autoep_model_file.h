#pragma once
// The model-state files of an AutoEP universal checkpoint. ds_to_universal.py does not copy them:
// it torch.load()s each one, sets universal_checkpoint_info['expert_parameter_patterns'] and
// ['ds_autoep_layers'], and torch.save()s the result [tp §8]. Copying
// the source pickle's nodes keeps the objects it shared shared, so the writer memoizes as
// torch.save's pickler did; tensors become views of their source storages, served from the file.
#include <cstddef>

#include "zeromount/ds/state_bytes.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

// mp_rank_XX_model_states.pt of an AutoEP source (shard `shard`, one of TagIndex::mp_files, whose
// decoded pickle is `source_root`) as the converter re-saves it, built in `a`. The result shares
// the source's scalar nodes: `source_root`'s arena must outlive what is made from it.
const pt::Node* autoep_model_states_pickle(pt::Arena& a, const TagIndex& ix, size_t shard, const pt::Node* source_root,
                                           const ExtentMap& map);

}  // namespace zm::ds
