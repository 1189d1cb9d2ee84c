#pragma once
// DeepSpeed's optimizer-state files, written side: what one rank's *_optim_states.pt holds when
// DeepSpeed's optimizer classes save it at a target layout [layouts §2.2]: DeepSpeedZeroOptimizer
// (ZeRO-1/2), BF16_Optimizer and DeepSpeedZeroOptimizer_Stage3, typed from the index. The view
// turns the tree into a file.
#include <cstdint>

#include "zeromount/ds/state_bytes.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

// What an optimizer-state file of the target is made from.
struct OptimSource {
  const TagIndex& index;
  const PartitionPlan& plan;
  const SourceOptions& options;
  const pt::Node* model_root;  // the source's model-state pickle: its ds_config and ds_version
  ExtentMap map;
};

// Rank `rank`'s optimizer-state pickle at plan.target, built in `a`.
const pt::Node* optim_states_pickle(pt::Arena& a, const OptimSource& src, uint32_t rank);

}  // namespace zm::ds
