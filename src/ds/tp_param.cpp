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

std::optional<std::vector<pt::Extent>> merged_extents(const TagIndex& ix, const Param& p, size_t state) {
  const uint64_t es = pt::element_size(ix.master_dtype);
  std::vector<pt::Extent> out;
  if (p.rule == TpRule::Averaged) return std::nullopt;
  if (p.rule == TpRule::Replicated) {
    element_extents(p.slices.at(0).stored.at(state), 0, p.merged_numel, es, out);
    return out;
  }
  const TpCat cat = tp_cat_of(ix, p);
  for (uint64_t j = 0; j < cat.num_runs(); ++j) {
    const TpRun r = cat.run(j);
    element_extents(p.slices.at(r.rank).stored.at(state), r.offset, r.count, es, out);
  }
  return out;
}

}  // namespace zm::ds
