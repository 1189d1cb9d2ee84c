#pragma once
// Pieces both optimizer families read the same way (internal to the index layer).
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "zeromount/ds/field.h"
#include "zeromount/ds/shard_set.h"
#include "zeromount/ds/tag_index.h"

namespace zm::ds {

using ShapeList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// param_shapes: one ordered name->shape dict per group (stage 1/2) or sub-group (stage 3).
std::vector<ShapeList> read_param_shapes(const Field& model_root);
// Buffers, shared params, ds_version, and the dp_world_size check against the file count.
void read_model_common(TagIndex& index, const OpenShard& model);
// The keys of one (sub-)group's optimizer state, split as DeepSpeed splits them
// (tensor_fragment.py, set_optim_state_fragment): a 1-D tensor of the flat partition's length
// (`partition` elements) is partitioned with the master weights; any other value ('step', an int
// counter, a shape-[1] tensor) is one value per group. In a Muon group (`muon`: its param group
// says use_muon), 'momentum_buffer' is kept whole per parameter instead (TagIndex::whole_states).
// All lists in file order; all empty for a group without state (an optimizer that never stepped).
struct StateKeys {
  std::vector<std::string> flat, whole, scalars;
  bool operator==(const StateKeys&) const = default;
};
StateKeys split_state(const Field* state, uint64_t partition, bool muon = false);
// Rank 0's groups name the keys: TagIndex::state_names ("fp32", then each group's partitioned and
// whole keys in first-seen order), scalar_names likewise, and, where groups keep different ones
// (Muon), TagIndex::group_states. One entry in `groups` for an optimizer whose groups must agree.
void adopt_state_keys(TagIndex& index, const std::vector<StateKeys>& groups, const Field& where);
// `got` (of `state`, nullptr: none) must be `want`, rank 0's keys of the same group; `partition` is
// the flat partition's length, named when a key rank 0 partitions is not partitioned here.
void check_state_keys(const TagIndex& index, const StateKeys& want, const StateKeys& got, const Field* state,
                      const Field& where, uint64_t partition);
// One group's values of TagIndex::scalar_names (none for a group without state; StepValue::None
// for a name this group does not keep).
std::vector<StepValue> read_scalars(const TagIndex& index, const Field* state, uint32_t shard);

// From the model-state 'module': the training dtype (every trainable weight must have it) and,
// for stage 1/2 and BF16_Optimizer (`full_weights`), each trainable weight's extent and every
// frozen parameter (module entries that are neither trainable, buffers nor tied aliases).
// `elsewhere` are trainable parameters whose weights are not in 'module' (AutoEP experts live in
// per-expert files): they get a placeholder without bytes in module_weights.
void read_module(TagIndex& index, const OpenShard& model, bool full_weights,
                 const std::set<std::string>& elsewhere = {});

}  // namespace zm::ds
