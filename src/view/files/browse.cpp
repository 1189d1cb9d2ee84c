#include "zeromount/view/files/browse.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "zeromount/ds/inspect.h"
#include "zeromount/ds/state_bytes.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/dump.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"
#include "zeromount/view/files/number_rules.h"
#include "zeromount/view/files/stats.h"

namespace zm::view {

using pt::human_bytes;
using pt::lpad;
using pt::pad;
using pt::shape_text;
using pt::with_commas;

namespace {

std::string group_text(const ds::Param& p) {
  return std::to_string(p.group) + (p.sub_group >= 0 ? " (sub-group " + std::to_string(p.sub_group) + ")" : "");
}

std::string file_name(const std::string& path) {
  return path.substr(path.find_last_of('/') + 1);
}

// The weights' statistics, with the sums per expert of a packed parameter in the same pass.
Stats compute_stats(const MountedTag& t, const ds::Param& p, const pt::ExtentReader& src, ExpertSums& experts) {
  Stats s;
  StateReader reader(t, p, {0});
  std::vector<std::vector<float>> block;
  while (const size_t n = reader.next(src, block)) experts.add(s, block[0].data(), n);
  return s;
}

// A packed expert parameter's lines: every expert's L2 norm and RMS, and whether the norm-outlier
// rule flags it (with fewer than kMinSiblings experts it judges none: "-"). Fixed widths, as the
// statistics: `sums` not packed() gives the layout with zeros.
void expert_lines(const ds::Param& p, uint64_t experts, const ExpertSums& sums,
                  const std::function<void(const std::string&, const std::string&)>& line) {
  const uint64_t per = p.numel / experts;
  line("experts", std::to_string(experts) + " packed on dim 0, " + with_commas(per) +
                      " elements each; RMS = L2 norm / sqrt(elements)");
  const ExpertOutliers o = expert_outliers(sums.sumsq(), per);
  const size_t w = std::to_string(experts - 1).size();
  for (size_t e = 0; e < experts; ++e) {
    const double sq = sums.packed() ? sums.sumsq()[e] : 0;
    const char* flag = o.rms.empty() ? "  -" : o.outlier[e] ? "yes" : " no";
    line("", "expert " + lpad(std::to_string(e), w) + "  L2 norm " + stat_text(std::sqrt(sq)) + "  RMS " +
                 stat_text(std::sqrt(sq / double(per))) + "  norm-outlier " + flag);
  }
  line("", "median RMS " + stat_text(o.rms.empty() ? NAN : o.median) + " (" + std::to_string(kMinSiblings) +
               " or more experts: an RMS over " + std::to_string(int(kOutlierFactor)) + "x the median or under 1/" +
               std::to_string(int(kOutlierFactor)) + " of it is an outlier)");
}

}  // namespace

std::string params_readme(const std::string& tag, bool report) {
  return "This folder is made up by zeromount from the shards of " + tag + "; nothing here is stored.\n\n" +
         (report ? "report.html          a page to look at: the run, every parameter's statistics, Adam update sizes\n"
                   "                     and histograms, bar charts per layer (computed when first opened)\n"
                 : "") +
         "summary              one row per trainable parameter: name, shape, dtype, numel, group, bytes\n"
         "<param>/info         shape, dtypes, group, which dp ranks hold which elements, statistics of the\n"
         "                     finite fp32 values and counts of NaN and inf; packed experts (transformers 5's\n"
         "                     mlp.experts.gate_up_proj [E, 2I, H]): every expert's L2 norm and RMS\n"
         "                     (computed when you read it, then cached)\n"
         "<param>/<state>.npy  one optimizer state as a numpy array: np.load(path, mmap_mode='r')\n\n"
         "Folder names are parameter names, escaped only where a name cannot be a folder: '/' is written %2F,\n"
         "\".\" and \"..\" as %2E and %2E%2E, a parameter named README, summary or report.html gets %52EADME,\n"
         "%73ummary or %72eport.html, and a name over 255 bytes is cut and ends in %~<hash> (its info holds the\n"
         "whole name).\n"
         "The consolidated fp32 weights, as zero_to_fp32.py writes them, are in ../" +
         tag +
         "_fp32/model.safetensors.\n"
         "DeepSpeed's loaders read ../" +
         tag + "_universal/, which this folder does not change.\n";
}

std::string params_summary(const ds::TagIndex& ix) {
  const std::string dt(pt::dtype_name(ix.master_dtype));
  const size_t es = pt::element_size(ix.master_dtype);
  size_t wn = 4, ws = 5, wc = 5;
  uint64_t total = 0;
  for (const auto& p : ix.params) {
    wn = std::max(wn, p.name.size());
    ws = std::max(ws, shape_text(p.shape).size());
    total += p.numel;
  }
  wc = std::max(wc, with_commas(total).size());
  std::string o = pad("name", wn + 2) + pad("shape", ws + 2) + pad("dtype", dt.size() + 2) + lpad("numel", wc) + "  " +
                  pad("group", 6) + lpad("bytes", 10) + "\n";
  for (const auto& p : ix.params)
    o += pad(p.name, wn + 2) + pad(shape_text(p.shape), ws + 2) + pad(dt, dt.size() + 2) +
         lpad(with_commas(p.numel), wc) + "  " + pad(std::to_string(p.group), 6) + lpad(human_bytes(p.numel * es), 10) +
         "\n";
  o += "\n" + pad("total: " + with_commas(ix.params.size()) + " parameters", wn + ws + dt.size() + 6) +
       lpad(with_commas(total), wc) + "  " + pad("", 6) + lpad(human_bytes(total * es), 10) + "\n";
  return o;
}

std::string param_info(const MountedTag& t, const ds::Param& p, const pt::ExtentReader* src) {
  const ds::TagIndex& ix = *t.index;
  std::string o;
  auto line = [&](const std::string& k, const std::string& v) { o += pad(k, 11) + v + "\n"; };
  line("name", p.name);
  line("shape", shape_text(p.shape));
  line("dtype", std::string(pt::dtype_name(ix.master_dtype)) + " (master weights and optimizer states)");
  line("module", std::string(pt::dtype_name(ix.module_dtype)) + " (the training precision of the module weights)");
  if (ix.master_dtype != pt::DType::F32)
    line("note", "the source holds " + std::string(pt::dtype_name(ix.master_dtype)) +
                     " master weights where fp32 is usual; they are served as stored" +
                     (ix.master_dtype == pt::DType::BF16 ? " (the .npy files widen them to float32)" : ""));
  line("numel", with_commas(p.numel));
  line("group", group_text(p));
  line("states", [&] {
    std::string s;
    for (size_t k = 0; k < ix.state_names.size(); ++k)
      if (ix.has(p, k))
        s += (k ? ", " : "") + ix.state_names[k] +
             (ix.whole(k) ? " (Muon: whole on every rank it spans, served from rank " +
                                std::to_string(p.stored.at(k).at(0).rank) + "'s copy)"
                          : "");
    return s;
  }());
  std::string part = "ZeRO-" + std::to_string(ix.stage) + " over " + std::to_string(ix.dp) + " dp ranks";
  if (ix.stage == 3) part += ", ceil(" + with_commas(p.numel) + "/" + std::to_string(ix.dp) + ") per rank";
  line("partition", part);
  // A parallel parameter is a merge of tensor-parallel slices: its rule says where it comes from.
  if (p.rule == ds::TpRule::Expert)
    line("merge", std::string(ds::tp_rule_name(p.rule)) + " of " + std::to_string(p.slices.size()) +
                      " ep ranks joined on dim 0 (" + std::to_string(p.ep_num_experts) + " experts)");
  else if (ix.parallel())
    line("merge", std::string(ds::tp_rule_name(p.rule)) + (p.vocab ? ", vocabulary" : "") + " over tp " +
                      std::to_string(ix.tp) + " x pp " + std::to_string(ix.pp));
  const auto frags = ix.parallel() ? std::vector<ds::Fragment>{} : ix.fragments(p, 0);
  for (size_t k = 0; k < frags.size(); ++k) {
    const ds::Fragment& f = frags[k];
    line(k ? "" : "ranks", "rank " + std::to_string(f.rank) + ": elements [" + with_commas(f.start) + ", " +
                               with_commas(f.start + f.numel) + ") in " + file_name(ix.shards.at(f.extent.file).path));
  }
  // Fixed widths: the size is known before the values are read.
  const size_t count_width = with_commas(p.numel).size();
  auto count = [&](uint64_t c) { return lpad(with_commas(c), count_width); };
  const uint64_t experts = packed_experts(p.name, p.shape);
  ExpertSums sums(src ? experts : 0, p.numel);
  if (src) {
    const Stats s = compute_stats(t, p, *src, sums);
    line("min", stat_text(s.lowest()));
    line("max", stat_text(s.highest()));
    line("mean", stat_text(s.average()));
    line("std", stat_text(s.deviation()));
    line("L2 norm", stat_text(s.l2()));
    line("NaN", count(s.nan));
    line("inf", count(s.inf));
  } else {
    for (const char* k : {"min", "max", "mean", "std", "L2 norm"}) line(k, stat_text(0));
    for (const char* k : {"NaN", "inf"}) line(k, count(0));
  }
  if (experts) expert_lines(p, experts, sums, line);
  return o;
}

pt::VirtualFile param_npy(const MountedTag& t, const ds::Param& p, size_t state) {
  std::string shape = "(";
  for (size_t k = 0; k < p.shape.size(); ++k)
    shape += std::to_string(p.shape[k]) + (p.shape.size() == 1 || k + 1 < p.shape.size() ? ", " : "");
  if (p.shape.size() == 1) shape.pop_back();
  shape += ")";
  // numpy has no bfloat16 (it would be an opaque '<V2'): bf16 states are served widened to float32,
  // which is exact.
  const pt::DType stored = t.index->master_dtype, served = stored == pt::DType::BF16 ? pt::DType::F32 : stored;
  std::string header =
      "{'descr': '" + std::string(pt::numpy_descr(served)) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes and ending in \n.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string pre = "\x93NUMPY";
  pre += '\x01';
  pre += '\x00';
  pre += char(header.size() & 0xFF);
  pre += char(header.size() >> 8);
  pt::VirtualFile f;
  f.append_inline(pre + header);
  ds::state_bytes(*t.index, p, state, t.mapper(), f);
  return f;
}

}  // namespace zm::view
