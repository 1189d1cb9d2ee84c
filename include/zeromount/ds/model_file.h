#pragma once
// DeepSpeed's model-state files, written side: what one rank's mp_rank_00_model_states.pt (ZeRO-1/2,
// BF16_Optimizer) or zero_pp_rank_<r>_mp_rank_00_model_states.pt (ZeRO-3) holds when DeepSpeed saves
// at a target layout [layouts §2.1], typed from the index. ds/optim_file.h's twin; the view
// turns the tree into a file.
#include <cstdint>
#include <vector>

#include "zeromount/ds/optim_file.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

// What a model-state file of the target is made from.
struct ModelSource {
  const TagIndex& index;
  const PartitionPlan& plan;
  // The source's model-state pickle: every key is copied, the ones above made for the target. Its
  // 'module' must hold only the index's parameters, frozen parameters, buffers and tied aliases.
  const pt::Node* model_root;
  const std::vector<PlainTensor>& frozen;  // in the source's stored dtype, full
  ExtentMap map;
};

// Rank `rank`'s model-state pickle at plan.target, built in `a`.
const pt::Node* model_states_pickle(pt::Arena& a, const ModelSource& src, uint32_t rank);

// The training (low) precision's dtype.
pt::DType lp_dtype(Precision p);

}  // namespace zm::ds
