#pragma once
// Pieces both optimizer families read the same way (internal to the index layer).
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
StepValue read_step(const Field& step, uint32_t shard);
// The keys of one optimizer state dict other than 'step', in file order.
std::vector<std::string> state_keys(const Field& state);
uint64_t numel_of(const std::vector<int64_t>& shape);

}  // namespace zm::ds
