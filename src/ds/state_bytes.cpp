#include "zeromount/ds/state_bytes.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "zeromount/ds/tp_param.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_writer.h"

namespace zm::ds {

namespace {

// One rank's local state, mapped, for the computed merges.
std::vector<RankBytes> rank_bytes(const TagIndex& ix, const Param& p, size_t state, const ExtentMap& map) {
  std::vector<RankBytes> out;
  const uint64_t es = pt::element_size(ix.master_dtype);
  for (const auto& s : p.slices) {
    const uint64_t n = pt::numel(s.shape);
    std::vector<pt::Extent> ext;
    element_extents(s.stored.at(state), 0, n, es, ext);
    for (auto& e : ext) e = map(e);
    out.emplace_back(std::move(ext));
  }
  return out;
}

}  // namespace

void state_bytes(const TagIndex& ix, const Param& p, size_t state, const ExtentMap& map, pt::Tensor& out) {
  if (!ix.parallel()) {
    for (const auto& fr : ix.fragments(p, state)) out.data.push_back(map(fr.extent));
    return;
  }
  const std::string what = p.name + " (" + ix.state_names[state] + ")";
  switch (p.rule) {
    case TpRule::Averaged:
      out.append_computed(std::make_shared<AveragedTensor>(rank_bytes(ix, p, state, map), ix.master_dtype, what));
      return;
    case TpRule::Replicated:
      out.append_computed(std::make_shared<ReplicatedTensor>(rank_bytes(ix, p, state, map), ix.master_dtype, what));
      return;
    case TpRule::Expert:  // the EP ranks' local experts in turn, as a cat on dim 0
    case TpRule::Cat:
      // A cat on dim 0 is each rank's bytes in turn: a few extents, nothing computed.
      if (p.cat_dim == 0) {
        const auto extents = merged_extents(ix, p, state);
        for (const auto& e : *extents) out.data.push_back(map(e));
        return;
      }
      [[fallthrough]];
    default:
      out.append_computed(
          std::make_shared<ConcatenatedTensor>(tp_cat_of(ix, p), rank_bytes(ix, p, state, map), ix.master_dtype, what));
  }
}

void state_bytes(const TagIndex& ix, const Param& p, size_t state, const ExtentMap& map, pt::VirtualFile& f) {
  pt::Tensor x;
  state_bytes(ix, p, state, map, x);
  uint64_t left = p.numel * pt::element_size(ix.master_dtype);  // a vocabulary cut is a prefix
  for (pt::Extent e : x.data) {
    if (left == 0) break;
    if (e.file == pt::kComputedBytes && e.length > left)
      throw Error(p.name + ": a computed merge with a vocabulary cut is not supported", EIO);
    e.length = std::min(e.length, left);
    left -= e.length;
    pt::append_piece(f, x, e);
  }
}

}  // namespace zm::ds
