#pragma once
// A tag's report page, section Experts: for each packed expert parameter (number_rules.h:
// packed_experts), one bar per expert of its RMS, so that an expert that never trained stands out.
#include <string>

#include "zeromount/ds/tag_index.h"
#include "zeromount/view/files/report_figures.h"

namespace zm::view {

// Empty when the tag has no packed expert parameter. `f` null: the same layout with placeholders
// (the page's size is known before any tensor is read).
std::string experts_section(const ds::TagIndex& ix, const TagFigures* f);

}  // namespace zm::view
