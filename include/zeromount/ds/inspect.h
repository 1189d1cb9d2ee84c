#pragma once
// `zeromount inspect`: the index of a tag as a summary for people and as stable JSON for scripts
// (schema in docs/inspect-json.md).
#include <string>

#include "zeromount/ds/tag_index.h"

namespace zm::ds {

// Reads a 0-d step tensor's value from its shard (or returns the stored int/float).
double step_number(const TagIndex& index, const StepValue& step);

// "ZeRO-3 (4 sub-groups)", "BF16_Optimizer (ZeRO-1 layout)".
std::string stage_text(const TagIndex& index);
// "DynamicLossScaler (cur_scale 256, ...)": every field, since a resume depends on all of them.
std::string loss_scaler_text(const LossScaler& scaler);
// The elements of the trainable parameters.
uint64_t trainable_numel(const TagIndex& index);
// "exp_avg, exp_avg_sq", or why there are none.
std::string states_text(const TagIndex& index);

std::string inspect_text(const TagIndex& index);
std::string inspect_json(const TagIndex& index);

}  // namespace zm::ds
