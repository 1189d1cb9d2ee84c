#pragma once
// `<T>_params/report.html`, one self-contained HTML page per tag (docs/SEMANTICS.md): the run, a
// row per parameter with statistics, Adam update sizes and histograms, bar charts per layer.
// Inline SVG and CSS only: no script, no network. Laid out with fixed-width numbers: without the
// figures (a null pointer), a page has the size it has with them, which is how stat knows it.
#include <string>

#include "zeromount/view/files/report_figures.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

// `<T>_params/report.html`; `figures` null: the same bytes' count, with placeholders.
std::string tag_report(const MountedTag& t, const TagFigures* figures);

}  // namespace zm::view
