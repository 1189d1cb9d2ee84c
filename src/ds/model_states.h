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
// The 'step' of one group's (or sub-group's) optimizer state; StepValue::None when it has none.
StepValue read_group_step(const Field& state, uint32_t shard);
// The keys of one optimizer state dict other than 'step', in file order.
std::vector<std::string> state_keys(const Field& state);
uint64_t numel_of(const std::vector<int64_t>& shape);

// The one mixed-dtype check: `tensor` must be `want`, the dtype of `whose` (e.g. "the master weights").
void require_dtype(const Field& tensor, pt::DType want, const std::string& whose);
// optimizer_state_dict.loss_scaler, field by field; LossScaler::None when absent (BF16_Optimizer).
LossScaler read_loss_scaler(const Field& osd);
// From the model-state 'module': the training dtype (every trainable weight must have it) and,
// for stage 1/2 and BF16_Optimizer (`full_weights`), each trainable weight's extent and every
// frozen parameter (module entries that are neither trainable, buffers nor tied aliases).
// `elsewhere` are trainable parameters whose weights are not in 'module' (AutoEP experts live in
// per-expert files): they get a placeholder without bytes in module_weights.
void read_module(TagIndex& index, const OpenShard& model, bool full_weights,
                 const std::set<std::string>& elsewhere = {});

}  // namespace zm::ds
