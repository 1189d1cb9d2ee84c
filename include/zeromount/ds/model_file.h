#pragma once
// DeepSpeed's model-state files, written side: what one rank's mp_rank_00_model_states.pt (ZeRO-1/2,
// BF16_Optimizer) or zero_pp_rank_<r>_mp_rank_00_model_states.pt (ZeRO-3) holds when DeepSpeed saves
// at a target layout [layouts §2.1], typed from the index. ds/optim_file.h's twin; the view
// turns the tree into a file.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zeromount/ds/optim_file.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

// What a target's model-state files take from the source's model-state pickle, kept in place of
// the decoded pickle: every key but those the target remakes, and the module's key order. The
// decoded pickle of a 20,000-parameter ZeRO-3 tag holds a tensor, a name and a shape per
// parameter (about 90 MiB); this holds a view of each name (bench/plans.py).
struct ModelSkeleton {
  pt::Arena arena;                            // owns root and module_metadata
  const pt::Node* root = nullptr;             // the source's keys in order; the values the target remakes
                                              // ('module', param_shapes, frozen_param_*) are None
  const pt::Node* module_metadata = nullptr;  // the module dict's BUILD state (_metadata), or null
  std::vector<std::string_view> module_keys;  // the module's keys in order, views of the index's names
  // Why no target can present this source (an entry of 'module' the index does not know, or no
  // 'module' at all); empty when every target can.
  std::string refusal;
};

// The skeleton of `model_root`, the tag's decoded model-state pickle, which may be let go after.
// `frozen` is the frozen parameters the target's module holds (they may be module entries).
std::shared_ptr<const ModelSkeleton> model_skeleton(const TagIndex& index, const std::vector<PlainTensor>& frozen,
                                                    const pt::Node* model_root);

// What a model-state file of the target is made from.
struct ModelSource {
  const TagIndex& index;
  const PartitionPlan& plan;
  const ModelSkeleton& source;             // its refusal is empty
  const std::vector<PlainTensor>& frozen;  // in the source's stored dtype, full
  ExtentMap map;
};

// Rank `rank`'s model-state pickle at plan.target, built in `a`.
const pt::Node* model_states_pickle(pt::Arena& a, const ModelSource& src, uint32_t rank);

// The training (low) precision's dtype.
pt::DType lp_dtype(Precision p);

}  // namespace zm::ds
