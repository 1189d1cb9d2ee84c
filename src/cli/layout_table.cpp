// `zeromount inspect SRC --layout NAME`: the target's partition table (spec fake-layouts.md §3),
// per rank and group: flat length, padding and which parameters each rank holds. For large W only
// the first and last ranks are printed, so the output stays bounded.
#include <iostream>
#include <sstream>

#include "commands.h"
#include "zeromount/ds/inspect.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"

namespace zm::cli {

namespace {

constexpr uint32_t kShownRanks = 4;  // first and last ranks shown when W is larger than 2x this

std::string holds(const ds::TagIndex& ix, const std::vector<ds::FragmentAddress>& pieces) {
  std::string s;
  for (const auto& f : pieces) {
    const ds::Param& p = ix.params[f.param];
    s += (s.empty() ? "" : ", ") + p.name;
    if (f.numel != p.numel)
      s += "[" + std::to_string(f.param_start) + ":" + std::to_string(f.param_start + f.numel) + "]";
  }
  return s.empty() ? "-" : s;
}

template <typename F>
void for_shown_ranks(uint32_t W, std::ostream& out, F&& row) {
  for (uint32_t r = 0; r < W; ++r) {
    if (W > 2 * kShownRanks && r == kShownRanks) {
      out << "  ... " << (W - 2 * kShownRanks) << " more ranks ...\n";
      r = W - kShownRanks;
    }
    row(r);
  }
}

}  // namespace

std::string layout_table(const ds::TagIndex& ix, const ds::TargetLayout& target) {
  const ds::PartitionPlan plan = ds::plan_partitions(ix, target);
  const uint32_t W = target.dp;
  std::ostringstream out;
  out << ix.tag << " (" << ds::target_name(ds::source_layout(ix)) << ") as " << ds::target_name(target) << ": "
      << ix.params.size() << " trainable params, " << plan.num_groups << " param group(s)\n";
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const ds::FlatGroup& fg = plan.groups[g];
    out << "group " << g << ": " << fg.params.size() << " params, N = " << pt::with_commas(fg.numel)
        << ", padded T = " << pt::with_commas(fg.padded) << ", partition P = " << pt::with_commas(fg.partition)
        << " per rank\n";
    for_shown_ranks(W, out, [&](uint32_t r) {
      const ds::RankPartition rp = ds::rank_slice(plan, ix, r, g);
      out << "  rank " << r << ": fp32 " << pt::with_commas(rp.fp32_numel) << ", valid " << pt::with_commas(rp.valid)
          << ", padding " << pt::with_commas(rp.padding) << ": " << holds(ix, rp.mappings) << "\n";
    });
  }
  for (size_t s = 0; s < plan.sub_groups.size(); ++s) {
    const ds::SubGroup& sg = plan.sub_groups[s];
    out << "sub-group " << s << " (group " << sg.group << "): " << sg.params.size() << " params, "
        << pt::with_commas(sg.numel) << " elements per rank\n";
    for_shown_ranks(W, out, [&](uint32_t r) {
      const ds::RankSubGroup rs = ds::rank_sub_group(plan, ix, r, s);
      uint64_t valid = 0;
      for (const auto& p : rs.pieces) valid += p.numel;
      out << "  rank " << r << ": flat " << pt::with_commas(rs.numel) << ", padding "
          << pt::with_commas(rs.numel - valid) << ": " << holds(ix, rs.pieces) << "\n";
    });
  }
  for (size_t g = 0; g < plan.group_sub_groups.size(); ++g)
    if (plan.group_sub_groups[g].empty()) out << "group " << g << ": no trainable parameter ('params': [])\n";
  return out.str();
}

}  // namespace zm::cli
