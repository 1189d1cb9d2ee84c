#pragma once
// `report.html` across the tags of a checkpoint folder or of a run folder (docs/SEMANTICS.md):
// lines per layer against the step. Inline SVG and CSS only; laid out with fixed-width numbers,
// as the page per tag is (report_page.h).
#include <string>
#include <vector>

#include "zeromount/view/files/report_figures.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

// `report.html` of a folder (`title`: its path in the mount) across `tags`, in training order;
// `left_out`: tags not shown, and why. `figures` null: placeholders of the same width.
std::string run_report(const std::string& title, const std::vector<NamedTag>& tags,
                       const std::vector<std::string>& left_out, const RunFigures* figures);

}  // namespace zm::view
