// The index's answers: which byte ranges of which shard hold a parameter's state. Stage 3 keeps
// no fragments: its pieces are computed from the partition arithmetic when asked.
#include "zeromount/ds/tag_index.h"

#include <algorithm>

#include "zeromount/pt/error.h"

namespace zm::ds {

uint64_t TagIndex::state_bytes() const {
  uint64_t n = 0;
  for (const auto& p : params)
    for (size_t k = 0; k < state_names.size(); ++k)
      if (has(p, k)) n += p.numel * pt::element_size(master_dtype);
  return n;
}

std::vector<Fragment> TagIndex::fragments(const Param& p, size_t state) const {
  if (parallel()) {
    auto merged = merged_extents(*this, p, state);
    if (!merged)
      throw Error(p.name + ": an averaged tensor-parallel parameter has no stored bytes (read it from _universal)",
                  EIO);
    std::vector<Fragment> out;
    const uint64_t es = pt::element_size(master_dtype);
    uint64_t at = 0, left = p.numel * es;  // a vocabulary cut is a prefix of the merge
    for (pt::Extent e : *merged) {
      if (left == 0) break;
      e.length = std::min(e.length, left);
      left -= e.length;
      out.push_back({0, at / es, e.length / es, e});
      at += e.length;
    }
    return out;
  }
  if (stage != 3) return p.stored.at(state);
  return zero3_fragments(p, state, 0, p.numel);
}

std::vector<Fragment> TagIndex::zero3_fragments(const Param& p, size_t state, uint64_t from, uint64_t count) const {
  std::vector<Fragment> out;
  if (p.numel == 0 || count == 0 || from >= p.numel) return out;
  const uint64_t W = uint64_t(dp), part = zero3_partition(p.numel, W), es = pt::element_size(master_dtype);
  const size_t S = sub_groups, K = state_names.size();
  // Ranks [r0, r1) hold elements [from, from + count); every rank before the last full one holds
  // `part` elements. One bounds check for the whole loop instead of two per rank: with 512 ranks
  // and a target that asks for every parameter of every rank file, this loop is the hot path of a
  // layout listing (bench/README.md).
  const uint64_t end = std::min(p.numel, from + count);
  const uint64_t r0 = from / part, r1 = std::min(W, (end + part - 1) / part);
  if (r1 > optim_shard.size() || p.sub_group < 0 || state >= K ||
      (r1 ? ((r1 - 1) * S + size_t(p.sub_group)) * K + state >= flat_offsets.size() : false))
    throw Error(p.name + ": the stage-3 layout does not cover its ranks", EIO);
  out.reserve(size_t(r1 - r0));
  const uint64_t* offs = flat_offsets.data();
  for (uint64_t r = r0; r < r1; ++r) {
    const uint64_t valid = valid_on_rank(p.numel, part, r);
    if (valid == 0) break;
    const uint64_t base = offs[(r * S + size_t(p.sub_group)) * K + state];
    out.push_back({uint32_t(r), part * r, valid, pt::Extent{optim_shard[r], base + p.offset * es, valid * es}});
  }
  return out;
}

std::vector<Fragment> TagIndex::fragments(const Param& p, size_t state, uint64_t from, uint64_t count) const {
  if (!parallel() && stage == 3) return zero3_fragments(p, state, from, count);
  std::vector<Fragment> all = parallel() ? fragments(p, state) : std::vector<Fragment>{};
  const std::vector<Fragment>& src = parallel() ? all : p.stored.at(state);
  // Pieces are in flat order: the first one that ends after `from`, up to the first one that
  // starts at or after from + count.
  const uint64_t end = from + count;
  auto it = std::partition_point(src.begin(), src.end(), [&](const Fragment& f) { return f.start + f.numel <= from; });
  std::vector<Fragment> out;
  for (; it != src.end() && it->start < end; ++it)
    if (it->numel) out.push_back(*it);
  return out;
}

const StepValue* TagIndex::value(int64_t g, size_t k) const {
  if (g < 0 || size_t(g) >= scalars.size() || k >= scalars[size_t(g)].size()) return nullptr;
  const StepValue& v = scalars[size_t(g)][k];
  return v.kind == StepValue::None ? nullptr : &v;
}

const StepValue* TagIndex::step(size_t s) const {
  const auto it = std::find(scalar_names.begin(), scalar_names.end(), "step");
  return it == scalar_names.end() ? nullptr : value(int64_t(s), size_t(it - scalar_names.begin()));
}

const StepValue* TagIndex::run_step() const {
  for (size_t s = 0; s < scalars.size(); ++s)
    if (const StepValue* v = step(s)) return v;
  return nullptr;
}

const Param* TagIndex::find(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

void element_extents(const std::vector<Fragment>& frags, uint64_t from, uint64_t count, uint64_t es,
                     std::vector<pt::Extent>& out) {
  uint64_t have = 0;
  for (const Fragment& f : frags) {
    if (have == count) break;
    const uint64_t lo = std::max(from, f.start), hi = std::min(from + count, f.start + f.numel);
    if (lo >= hi) continue;
    const pt::Extent e{f.extent.file, f.extent.offset + (lo - f.start) * es, (hi - lo) * es};
    if (!out.empty() && out.back().file == e.file && out.back().offset + out.back().length == e.offset)
      out.back().length += e.length;  // adjacent runs of one rank read as one
    else
      out.push_back(e);
    have += hi - lo;
  }
  if (have != count) throw Error("the index does not cover a parameter's elements", EIO);
}

std::vector<pt::Extent> element_extents(const std::vector<Fragment>& frags, uint64_t from, uint64_t count,
                                        uint64_t es) {
  std::vector<pt::Extent> out;
  element_extents(frags, from, count, es, out);
  return out;
}

}  // namespace zm::ds
