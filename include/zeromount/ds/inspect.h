#pragma once
// `zeromount inspect`: the index of a tag as a summary for people and as stable JSON for scripts
// (schema in docs/inspect-json.md).
#include <string>

#include "zeromount/ds/tag_index.h"

namespace zm::ds {

// Reads a 0-d step tensor's value from its shard (or returns the stored int/float).
double step_number(const TagIndex& index, const StepValue& step);

std::string inspect_text(const TagIndex& index);
std::string inspect_json(const TagIndex& index);

}  // namespace zm::ds
