#include "zeromount/ds/tp_param.h"

#include "zeromount/pt/error.h"

namespace zm::ds {

TpCat tp_cat_of(const TagIndex& ix, const Param& p) {
  std::vector<Shape> shapes;
  for (const auto& s : p.slices) shapes.push_back(s.shape);
  switch (p.rule) {
    case TpRule::TwoSubParams:
      return TpCat::two_sub_params(shapes);
    case TpRule::SubParams: {
      const SubParamRule& r = ix.sub_param_rules.at(size_t(p.sub_rule));
      SubParamShape spec{r.shape, r.partition_dim};
      std::vector<uint64_t> numels;
      for (const auto& s : shapes) numels.push_back(pt::numel(s));
      return TpCat::sub_params(sub_param_views(spec, p.sub_widths, numels, p.name), r.partition_dim, p.sub_widths);
    }
    default:
      return TpCat::concat(shapes, p.cat_dim);
  }
}

void slice_extents(const std::vector<Fragment>& stored, uint64_t first, uint64_t count, uint64_t esize,
                   std::vector<pt::Extent>& out) {
  for (const Fragment& f : stored) {  // pieces are in order and contiguous (start = sum of earlier)
    if (count == 0) return;
    if (first >= f.start + f.numel) continue;
    const uint64_t within = first - f.start, take = std::min(count, f.numel - within);
    pt::Extent e = f.extent;
    e.offset += within * esize;
    e.length = take * esize;
    if (!out.empty() && out.back().file == e.file && out.back().offset + out.back().length == e.offset)
      out.back().length += e.length;  // adjacent runs of one rank read as one
    else
      out.push_back(e);
    first += take, count -= take;
  }
  if (count) throw Error("tensor-parallel slice holds fewer elements than its shape");
}

std::optional<std::vector<pt::Extent>> merged_extents(const TagIndex& ix, const Param& p, size_t state) {
  const uint64_t es = pt::element_size(ix.master_dtype);
  std::vector<pt::Extent> out;
  if (p.rule == TpRule::Averaged) return std::nullopt;
  if (p.rule == TpRule::Replicated) {
    slice_extents(p.slices.at(0).stored.at(state), 0, p.merged_numel, es, out);
    return out;
  }
  const TpCat cat = tp_cat_of(ix, p);
  for (uint64_t j = 0; j < cat.num_runs(); ++j) {
    const TpRun r = cat.run(j);
    slice_extents(p.slices.at(r.rank).stored.at(state), r.offset, r.count, es, out);
  }
  return out;
}

}  // namespace zm::ds
