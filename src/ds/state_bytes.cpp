#include "zeromount/ds/state_bytes.h"

#include <memory>
#include <string>
#include <vector>

#include "zeromount/ds/tp_param.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/error.h"

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

// The whole merged storage of `p`'s state `state`, appended to `out`.
void storage_bytes(const TagIndex& ix, const Param& p, size_t state, const ExtentMap& map, pt::VirtualFile& out) {
  if (!ix.parallel()) {
    for (const auto& fr : ix.fragments(p, state)) out.append_extent(map(fr.extent));
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
        for (const auto& e : *extents) out.append_extent(map(e));
        return;
      }
      [[fallthrough]];
    default:
      out.append_computed(
          std::make_shared<ConcatenatedTensor>(tp_cat_of(ix, p), rank_bytes(ix, p, state, map), ix.master_dtype, what));
  }
}

}  // namespace

void state_bytes(const TagIndex& ix, const Param& p, size_t state, const ExtentMap& map, pt::Tensor& out) {
  storage_bytes(ix, p, state, map, out.bytes());
}

void state_bytes(const TagIndex& ix, const Param& p, size_t state, const ExtentMap& map, pt::VirtualFile& f) {
  pt::VirtualFile whole;
  storage_bytes(ix, p, state, map, whole);
  const uint64_t cut = p.numel * pt::element_size(ix.master_dtype);  // a vocabulary cut is a prefix
  for (const pt::Segment& s : whole.segments())
    if (s.kind == pt::Segment::Computed && s.start < cut && s.start + s.length > cut)
      throw Error(p.name + ": a computed merge with a vocabulary cut is not supported", EIO);
  f.append(whole, 0, cut);
}

const pt::Node* step_value_node(pt::Arena& a, const StepValue& v, const ExtentMap& map) {
  switch (v.kind) {
    case StepValue::Tensor: {
      pt::VirtualFile bytes;
      bytes.append_extent(map(v.extent));
      return pt::build::tensor(a, v.dtype, v.shape, std::move(bytes));
    }
    case StepValue::Int:
      return a.make_int(v.i);
    case StepValue::Float:
      return pt::build::real(a, v.f);
    case StepValue::None:
      break;
  }
  return pt::build::none(a);
}

}  // namespace zm::ds
