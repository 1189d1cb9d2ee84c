#include "zeromount/view/files/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"

namespace zm::view {

namespace html {

std::string escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (const char c : s) switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  return o;
}

std::string breakable(std::string_view s) {
  std::string o;
  for (size_t at = 0; at < s.size();) {
    const size_t dot = s.find('.', at);
    const size_t end = dot == std::string_view::npos ? s.size() : dot + 1;
    o += escape(s.substr(at, end - at));
    if (end < s.size()) o += "<wbr>";
    at = end;
  }
  return o;
}

std::string fit(std::string s, size_t width) {
  if (s.size() > width) throw std::logic_error("report layout: '" + s + "' is wider than " + std::to_string(width));
  s.insert(0, width - s.size(), ' ');
  return s;
}

std::string exact(double v) {
  char b[40];
  snprintf(b, sizeof b, "%.9e", v);
  return fit(b, 16);
}

std::string count(uint64_t c, size_t width) {
  return fit(std::to_string(c), width);
}

std::string read_cost(uint64_t bytes, uint64_t expected, double seconds) {
  char secs[32], rate[32] = "-";
  snprintf(secs, sizeof secs, "%.3f", seconds);
  if (seconds > 0) snprintf(rate, sizeof rate, "%.3g", std::min(double(bytes) / 1e9 / seconds, 99999.0));
  return "<span class=\"v\">" + count(bytes, digits(expected)) + "</span> bytes <span class=\"v\">" +
         fit("(" + pt::human_bytes(bytes) + ")", 12) + "</span> read in <span class=\"v\">" + fit(secs, 14) + " s, " +
         fit(rate, 8) + " GB/s</span>";
}

std::string step_text(double step) {
  char b[40];
  if (std::isnan(step))
    snprintf(b, sizeof b, "none");
  else if (step == std::floor(step) && std::fabs(step) < 1e13)
    snprintf(b, sizeof b, "%.0f", step);
  else
    snprintf(b, sizeof b, "%.6e", step);
  return fit(b, 14);
}

size_t digits(uint64_t n) {
  return std::to_string(n).size();
}

std::string coord(double v, double limit) {
  if (!(v >= 0)) v = 0;  // NaN included
  v = std::min(v, limit);
  const int width = int(digits(uint64_t(limit))) + 2;
  char b[40];
  snprintf(b, sizeof b, "%0*.1f", width, v);
  return fit(b, size_t(width));
}

namespace {

// One stylesheet for both pages. The parameter table is a CSS grid whose rows are `display:
// contents`, so that a row's cells can be put in any order: a sort is the :target anchor of a
// column header, which sets every cell's `order` to its row's rank in that column. No script.
constexpr const char* kStyle = R"(body{font:13px/1.45 system-ui,sans-serif;margin:1.2em 2em;color:#1d1d1f}
h1{font-size:1.45em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd}
code,.n,.v{font-family:ui-monospace,monospace}p.note{color:#555;max-width:70em}
table.kv td{padding:1px 14px 1px 0;vertical-align:top}table.kv td:first-child{color:#555;white-space:nowrap}
.t{display:grid;gap:1px 8px;align-items:center;font-size:12px}.r{display:contents}
.r>*{order:var(--o);white-space:nowrap}.v{text-align:right}.r>.n{white-space:normal;overflow-wrap:break-word;max-width:24em}
.h>*{order:-99999999!important;font-weight:600;position:sticky;top:0;background:#fff;border-bottom:1px solid #999;white-space:normal!important;align-self:end}
.h a{text-decoration:none;color:#36c;padding:0 1px}.b{color:#d00;font-weight:700}
svg{vertical-align:middle}svg .w{fill:#3a75b0}svg .m{fill:#b0753a}svg .g{fill:#3a75b0}svg .b{fill:#d00}
svg .l{fill:none;stroke:#3a75b0;stroke-width:1.3}svg circle.g{fill:#3a75b0}svg circle.b{fill:#d00}svg circle.n{display:none}
svg .ax{stroke:#bbb;stroke-width:1}.lg{color:#555}svg text.lg{fill:#666;font-size:10px;text-anchor:end;white-space:pre}svg text.bl{fill:#666;font-size:9px})";

}  // namespace

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width\"><title>" +
         escape(title) + "</title>\n<style>\n" + kStyle + "\n</style></head>\n<body>\n" + body + "</body></html>\n";
}

std::string histogram(const char* css_class, const std::string& what, const Bins* bins, size_t count_width) {
  constexpr double kHeight = 24, kSlot = 100.0 / kReportBins;
  uint64_t most = 0;
  if (bins)
    for (uint64_t c : bins->counts) most = std::max(most, c);
  std::string title = what + ", " + std::to_string(kReportBins) + " slots:";
  std::string path;
  for (size_t i = 0; i < kReportBins; ++i) {
    const bool used = bins && i < bins->counts.size();
    const uint64_t c = used ? bins->counts[i] : 0;
    const std::string line = "\n[" + exact(used ? bins->edges[i] : 0) + ", " + exact(used ? bins->edges[i + 1] : 0) +
                             ") " + count(c, count_width);
    title += used ? line : std::string(line.size(), ' ');
    // Any bin that holds a value shows at least 1 px.
    const double h = c ? std::max(1.0, kHeight * double(c) / double(most)) : 0;
    const std::string hs = coord(h, kHeight);
    path += "M" + std::to_string(int(double(i) * kSlot)) + " 24v-" + hs + "h4v" + hs + "z";
  }
  return "<svg width=\"100\" height=\"24\" viewBox=\"0 0 100 24\" class=\"hist\"><title>" + escape(title) +
         "</title><path class=\"" + css_class + "\" d=\"" + path + "\"/></svg>";
}

std::pair<std::string, std::string> axis_labels(double lo, double hi, size_t width) {
  const auto text = [](double v, int digits) {
    char b[48];
    snprintf(b, sizeof b, "%.*g", digits, v);
    return std::string(b);
  };
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {fit("", width), fit("", width)};
  if (lo == hi) return {fit("", width), fit(text(hi, 3), width)};
  std::string a, b;
  for (int digits = 3; digits <= 9; ++digits) {
    a = text(lo, digits);
    b = text(hi, digits);
    if (a.size() > width || b.size() > width) break;  // keep the last labels that fit
    if (a != b) return {fit(a, width), fit(b, width)};
  }
  a = text(lo, 3);
  b = text(hi, 3);
  return {fit(a, width), fit(b == a ? "" : b, width)};  // too close to tell apart in `width`: one label
}

}  // namespace html

namespace {

// A page's bytes, served only while the shards it was computed from are unchanged.
class CheckedText final : public pt::Computed {
 public:
  CheckedText(std::string text, std::vector<uint32_t> shards) : text_(std::move(text)), shards_(std::move(shards)) {}
  uint64_t size() const override { return text_.size(); }
  void read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const override {
    // A read of no bytes is the reader's identity check (FileTable: size, mtime, ctime, inode).
    for (uint32_t f : shards_) files.pread(f, 0, nullptr, 0);
    std::copy_n(text_.data() + offset, n, static_cast<char*>(out));
  }
  size_t memory_bytes() const override { return sizeof(*this) + text_.capacity() + shards_.capacity() * 4; }

 private:
  std::string text_;
  std::vector<uint32_t> shards_;
};

}  // namespace

pt::VirtualFile report_file(std::string html, std::vector<uint32_t> shards) {
  pt::VirtualFile f;
  f.append_computed(std::make_shared<const CheckedText>(std::move(html), std::move(shards)));
  return f;
}

}  // namespace zm::view
