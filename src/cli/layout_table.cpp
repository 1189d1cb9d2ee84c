// `zeromount inspect SRC --layout NAME`: the target's partition table [layouts §3],
// per rank and group: flat length, padding and which parameters each rank holds. For large W only
// the first and last ranks are printed, so the output stays bounded. `--json` gives the same table
// for scripts (docs/inspect-json.md).
#include <iostream>
#include <sstream>
#include <vector>

#include "commands.h"
#include "zeromount/ds/inspect.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"
#include "zeromount/view/files/torch_layouts.h"

namespace zm::cli {

namespace {

constexpr uint32_t kShownRanks = 4;  // first and last ranks shown when W is larger than 2x this

// The ranks a table lists: all of them, or for large W the first and last kShownRanks, since the
// per-rank arithmetic of every rank of W = 65536 takes minutes.
std::vector<uint32_t> shown_ranks(uint32_t W) {
  std::vector<uint32_t> r;
  for (uint32_t k = 0; k < W; ++k) {
    if (W > 2 * kShownRanks && k == kShownRanks) k = W - kShownRanks;
    r.push_back(k);
  }
  return r;
}

template <typename F>
void for_shown_ranks(uint32_t W, std::ostream& out, F&& row) {
  uint32_t next = 0;
  for (const uint32_t r : shown_ranks(W)) {
    if (r != next) out << "  ... " << (r - next) << " more ranks ...\n";
    row(r);
    next = r + 1;
  }
}

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

std::string holds_json(const ds::TagIndex& ix, const std::vector<ds::FragmentAddress>& pieces) {
  std::string s = "[";
  for (const auto& f : pieces)
    s += std::string(s.size() > 1 ? "," : "") + "{\"name\":" + pt::json_escape(ix.params[f.param].name) +
         ",\"from\":" + std::to_string(f.param_start) + ",\"numel\":" + std::to_string(f.numel) +
         ",\"offset\":" + std::to_string(f.start) + "}";
  return s + "]";
}

std::string ints_json(const std::vector<uint32_t>& v) {
  std::string s = "[";
  for (const uint32_t x : v) s += (s.size() > 1 ? "," : "") + std::to_string(x);
  return s + "]";
}

}  // namespace

ds::TargetLayout layout_named(const std::string& option, const std::string& name) {
  const auto target = ds::parse_target(name);
  if (!target) throw UsageError(option + ": '" + name + "' is not a layout name: " + std::string(ds::kTargetGrammar));
  return *target;
}

void check_layout_name(const std::string& option, const std::string& name) {
  if (!view::parse_torch_layout(name)) layout_named(option, name);
}

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

std::string layout_json(const ds::TagIndex& ix, const ds::TargetLayout& target) {
  const ds::PartitionPlan plan = ds::plan_partitions(ix, target);
  const std::vector<uint32_t> ranks = shown_ranks(target.dp);
  std::string o = "{\"format\":1,\"tag\":" + pt::json_escape(ix.tag) +
                  ",\"source_layout\":" + pt::json_escape(ds::target_name(ds::source_layout(ix))) +
                  ",\"layout\":" + pt::json_escape(ds::target_name(target)) + ",\"dp\":" + std::to_string(target.dp) +
                  ",\"params\":" + std::to_string(ix.params.size()) +
                  ",\"param_groups\":" + std::to_string(plan.num_groups) + ",\"ranks_shown\":" + ints_json(ranks) +
                  ",\"groups\":[";
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const ds::FlatGroup& fg = plan.groups[g];
    o += std::string(g ? "," : "") + "{\"group\":" + std::to_string(g) +
         ",\"params\":" + std::to_string(fg.params.size()) + ",\"numel\":" + std::to_string(fg.numel) +
         ",\"padded\":" + std::to_string(fg.padded) + ",\"partition\":" + std::to_string(fg.partition) + ",\"ranks\":[";
    for (size_t k = 0; k < ranks.size(); ++k) {
      const ds::RankPartition rp = ds::rank_slice(plan, ix, ranks[k], g);
      o += std::string(k ? "," : "") + "{\"rank\":" + std::to_string(ranks[k]) +
           ",\"fp32\":" + std::to_string(rp.fp32_numel) + ",\"valid\":" + std::to_string(rp.valid) +
           ",\"padding\":" + std::to_string(rp.padding) + ",\"holds\":" + holds_json(ix, rp.mappings) + "}";
    }
    o += "]}";
  }
  o += "],\"sub_groups\":[";
  for (size_t s = 0; s < plan.sub_groups.size(); ++s) {
    const ds::SubGroup& sg = plan.sub_groups[s];
    o += std::string(s ? "," : "") + "{\"sub_group\":" + std::to_string(s) + ",\"group\":" + std::to_string(sg.group) +
         ",\"params\":" + std::to_string(sg.params.size()) + ",\"numel\":" + std::to_string(sg.numel) + ",\"ranks\":[";
    for (size_t k = 0; k < ranks.size(); ++k) {
      const ds::RankSubGroup rs = ds::rank_sub_group(plan, ix, ranks[k], s);
      uint64_t valid = 0;
      for (const auto& p : rs.pieces) valid += p.numel;
      o += std::string(k ? "," : "") + "{\"rank\":" + std::to_string(ranks[k]) +
           ",\"flat\":" + std::to_string(rs.numel) + ",\"padding\":" + std::to_string(rs.numel - valid) +
           ",\"holds\":" + holds_json(ix, rs.pieces) + "}";
    }
    o += "]}";
  }
  std::vector<uint32_t> empty;
  for (size_t g = 0; g < plan.group_sub_groups.size(); ++g)
    if (plan.group_sub_groups[g].empty()) empty.push_back(uint32_t(g));
  return o + "],\"empty_groups\":" + ints_json(empty) + "}\n";
}

}  // namespace zm::cli
