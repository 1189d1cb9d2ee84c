#pragma once
// What both report pages are written with (src/view/files/report_*.cpp): escaping, fixed-width
// numbers and coordinates, the page's frame and its CSS, and the file a built page is served as.
// Every value-dependent piece has a width that does not depend on the value, so that a page laid
// out with placeholders has the size of the page laid out with its figures.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/files/report_figures.h"

namespace zm::view::html {

std::string escape(std::string_view s);
// escape(s) with a line-break opportunity (<wbr>) after every '.': a dotted parameter name wraps at
// its module boundaries in a narrow column.
std::string breakable(std::string_view s);
// `s` padded to `width`; a longer `s` is a layout bug (the page's size would change): throws.
std::string fit(std::string s, size_t width);
// A bin edge: the float value read back exactly, 16 characters ("%16.9e").
std::string exact(double v);
std::string count(uint64_t c, size_t width);
// A coordinate in [0, limit], one decimal, zero-padded to the width of `limit` ("012.5").
std::string coord(double v, double limit);
// A step as the pages print it, 14 characters: "1200", "none" (no step saved).
std::string step_text(double step);
// The labels of a chart's axis, bottom (lo) and top (hi), each `width` characters: as few
// significant digits as tell them apart ("12.21" and "12.25", never "12.2" twice); one label, at the
// top, when every value is the same; blank where nothing is finite.
std::pair<std::string, std::string> axis_labels(double lo, double hi, size_t width);
// Decimal digits of n (at least 1): the width of counts up to n.
size_t digits(uint64_t n);
// What a pass cost, as both pages say it: "N bytes (1.2 GiB) read in S s, R GB/s", each number of
// a fixed width (N that of `expected`, the most the pass can read).
std::string read_cost(uint64_t bytes, uint64_t expected, double seconds);
// "b" (shown in red) when something is not finite, "g" otherwise: one character either way.
inline const char* flag(bool bad) {
  return bad ? "b" : "g";
}

// The document around `body`: charset, title, the one stylesheet; nothing fetched.
std::string page(const std::string& title, const std::string& body);

// A histogram of kReportBins slots, 100 x 24 px, with every bin's edges and count in its title.
// `bins` null: placeholders.
std::string histogram(const char* css_class, const std::string& what, const Bins* bins, size_t count_width);

}  // namespace zm::view::html

namespace zm::view {

// A built page as a file whose every read first checks that the shards it was computed from
// (view file ids) are unchanged, and fails with ESTALE otherwise, as every made-up file does.
pt::VirtualFile report_file(std::string html, std::vector<uint32_t> shards);

}  // namespace zm::view
