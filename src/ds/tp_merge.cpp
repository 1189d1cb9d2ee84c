#include "zeromount/ds/tp_merge.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "zeromount/pt/error.h"

namespace zm::ds {

namespace {

uint64_t product(const Shape& s, size_t from, size_t to) {
  uint64_t n = 1;
  for (size_t k = from; k < to; ++k) n *= uint64_t(s[k]);
  return n;
}

// Python's rendering of lists and tuples, so that messages read like DeepSpeed's.
std::string py_seq(const Shape& s, bool tuple) {
  std::string out = tuple ? "(" : "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  if (tuple && s.size() == 1) out += ",";
  return out + (tuple ? ")" : "]");
}

// Slices must agree outside the cat dimension (torch.cat's rule); returns the normalized dim.
int check_slices(const std::vector<Shape>& slices, int dim, const char* rule) {
  if (slices.empty()) throw FormatError(std::string(rule) + ": no tensor-parallel slices");
  const int nd = int(slices[0].size());
  if (nd == 0) throw FormatError(std::string(rule) + ": zero-dimensional tensor cannot be concatenated");
  if (dim < 0) dim += nd;
  if (dim < 0 || dim >= nd)
    throw FormatError(std::string(rule) + ": dimension " + std::to_string(dim) + " out of range for " +
                      py_seq(slices[0], false));
  for (size_t t = 0; t < slices.size(); ++t) {
    bool same = int(slices[t].size()) == nd;
    for (int k = 0; same && k < nd; ++k) same = k == dim || slices[t][size_t(k)] == slices[0][size_t(k)];
    for (int64_t v : slices[t]) same = same && v >= 0;
    if (!same)
      throw FormatError(std::string(rule) + ": tp slice " + std::to_string(t) + " has shape " +
                        py_seq(slices[t], false) + ", slice 0 has " + py_seq(slices[0], false) +
                        "; they must agree outside dimension " + std::to_string(dim));
  }
  return dim;
}

}  // namespace

TpCat::TpCat(Shape shape, int dim, std::vector<int64_t> rank_dim, std::vector<Piece> pieces)
    : shape_(std::move(shape)), rank_dim_(std::move(rank_dim)) {
  outer_ = product(shape_, 0, size_t(dim));
  inner_ = product(shape_, size_t(dim) + 1, shape_.size());
  // Maximal runs: drop empty pieces and join a rank's adjacent pieces (a sub-parameter split at T = 1).
  for (const Piece& p : pieces) {
    if (p.width == 0 || inner_ == 0) continue;
    if (!pieces_.empty() && pieces_.back().rank == p.rank && pieces_.back().start + pieces_.back().width == p.start)
      pieces_.back().width += p.width;
    else
      pieces_.push_back(p);
  }
  // One rank giving all of its rows in order: the rows follow each other in the source too.
  if (pieces_.size() == 1 && pieces_[0].start == 0 && pieces_[0].width == rank_dim_[pieces_[0].rank]) {
    for (auto& d : rank_dim_) d *= int64_t(outer_);
    pieces_[0].width *= int64_t(outer_);
    outer_ = outer_ ? 1 : 0;
  }
  for (const Piece& p : pieces_) {
    piece_start_.push_back(row_);
    row_ += uint64_t(p.width) * inner_;
  }
}

TpCat TpCat::concat(const std::vector<Shape>& slices, int dim) {
  dim = check_slices(slices, dim, "torch.cat");
  Shape shape = slices[0];
  shape[size_t(dim)] = 0;
  std::vector<int64_t> rank_dim;
  std::vector<Piece> pieces;
  for (size_t t = 0; t < slices.size(); ++t) {
    rank_dim.push_back(slices[t][size_t(dim)]);
    pieces.push_back({uint32_t(t), 0, rank_dim.back()});
    shape[size_t(dim)] += rank_dim.back();
  }
  return TpCat(std::move(shape), dim, std::move(rank_dim), std::move(pieces));
}

TpCat TpCat::two_sub_params(const std::vector<Shape>& slices) {
  check_slices(slices, 0, "parameter_with_2_sub_params_cat_dim_0");
  Shape shape = slices[0];
  shape[0] = 0;
  std::vector<int64_t> rank_dim;
  for (const auto& s : slices) {
    // torch.chunk(x, 2, 0) gives chunks of ceil(n / 2): one chunk for n = 1, and then chunks[1] fails.
    if (s[0] == 1)
      throw FormatError("parameter_with_2_sub_params_cat_dim_0: a slice of shape " + py_seq(s, false) +
                        " splits into one chunk (DeepSpeed: IndexError: tuple index out of range)");
    rank_dim.push_back(s[0]);
    shape[0] += s[0];
  }
  std::vector<Piece> pieces;
  for (int half = 0; half < 2; ++half)
    for (size_t t = 0; t < slices.size(); ++t) {
      const int64_t first = (rank_dim[t] + 1) / 2;
      pieces.push_back({uint32_t(t), half ? first : 0, half ? rank_dim[t] - first : first});
    }
  return TpCat(std::move(shape), 0, std::move(rank_dim), std::move(pieces));
}

TpCat TpCat::sub_params(const std::vector<Shape>& views, int dim, const std::vector<std::vector<int64_t>>& widths) {
  dim = check_slices(views, dim, "parameter_with_sub_params");
  const size_t T = views.size();
  std::vector<int64_t> rank_dim(T), used(T, 0);
  for (size_t t = 0; t < T; ++t) rank_dim[t] = views[t][size_t(dim)];
  Shape shape = views[0];
  shape[size_t(dim)] = 0;
  std::vector<Piece> pieces;
  for (const auto& w : widths) {
    if (w.size() != T)
      throw FormatError("parameter_with_sub_params: " + std::to_string(w.size()) + " shard widths for " +
                        std::to_string(T) + " tp ranks");
    for (size_t t = 0; t < T; ++t) {
      if (w[t] < 0) throw FormatError("parameter_with_sub_params: negative shard width");
      pieces.push_back({uint32_t(t), used[t], w[t]});
      used[t] += w[t];
      shape[size_t(dim)] += w[t];
    }
  }
  for (size_t t = 0; t < T; ++t)
    if (used[t] != rank_dim[t])
      throw FormatError("parameter_with_sub_params: the shard widths of tp rank " + std::to_string(t) + " sum to " +
                        std::to_string(used[t]) + ", its view has " + std::to_string(rank_dim[t]));
  return TpCat(std::move(shape), dim, std::move(rank_dim), std::move(pieces));
}

TpRun TpCat::run(uint64_t j) const {
  const uint64_t i = j / pieces_.size();
  const Piece& p = pieces_[j % pieces_.size()];
  return {p.rank, (i * uint64_t(rank_dim_[p.rank]) + uint64_t(p.start)) * inner_, uint64_t(p.width) * inner_};
}

uint64_t TpCat::run_start(uint64_t j) const {
  if (pieces_.empty()) return 0;
  return (j / pieces_.size()) * row_ + piece_start_[j % pieces_.size()];
}

uint64_t TpCat::run_containing(uint64_t element) const {
  const uint64_t i = element / row_, within = element % row_;
  const auto p = std::upper_bound(piece_start_.begin(), piece_start_.end(), within) - piece_start_.begin() - 1;
  return i * pieces_.size() + uint64_t(p);
}

std::vector<Shape> sub_param_views(const SubParamShape& spec, const std::vector<std::vector<int64_t>>& widths,
                                   const std::vector<uint64_t>& rank_numels, const std::string& name) {
  const int pdim = spec.partition_dim;
  if (pdim < 0 || size_t(pdim) >= spec.entries.size())
    throw FormatError(name + ": sub-parameter partition_dim " + std::to_string(pdim) + " is outside its shape");
  const Shape& sizes = spec.entries[size_t(pdim)];
  if (widths.size() != sizes.size())
    throw FormatError("Got " + std::to_string(widths.size()) + " shard width entries for " +
                      std::to_string(sizes.size()) + " sub-parameters of " + name + ".");
  const size_t T = rank_numels.size();
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (widths[k].size() != T)
      throw FormatError("Sub-parameter of size " + std::to_string(sizes[k]) + " in " + name + " has " +
                        std::to_string(widths[k].size()) + " shard widths, expected one per tp rank (" +
                        std::to_string(T) + ").");
    const int64_t sum = std::accumulate(widths[k].begin(), widths[k].end(), int64_t(0));
    if (sum != sizes[k])
      throw FormatError("Shard widths " + py_seq(widths[k], false) + " for a sub-parameter of " + name + " sum to " +
                        std::to_string(sum) + ", expected " + std::to_string(sizes[k]) + ".");
  }
  // Tuples become their sums; at most one -1, resolved from all ranks' elements.
  Shape logical;
  for (const auto& e : spec.entries) logical.push_back(std::accumulate(e.begin(), e.end(), int64_t(0)));
  const uint64_t total = std::accumulate(rank_numels.begin(), rank_numels.end(), uint64_t(0));
  int holes = 0;
  size_t hole = 0;
  uint64_t known = 1;
  for (size_t k = 0; k < logical.size(); ++k)
    if (logical[k] < 0)
      ++holes, hole = k;
    else
      known *= uint64_t(logical[k]);
  if (holes > 1)
    throw FormatError("Sub-parameter shape " + py_seq(logical, false) + " of " + name + " has " +
                      std::to_string(holes) + " placeholder dimensions, so it cannot be resolved.");
  if (holes == 1) {
    if (known == 0 || total % known != 0)
      throw FormatError("Sub-parameter shape " + py_seq(logical, false) + " of " + name +
                        " cannot be resolved for a parameter with " + std::to_string(total) + " elements.");
    logical[hole] = int64_t(total / known);
  }
  std::vector<Shape> views;
  for (size_t t = 0; t < T; ++t) {
    Shape v = logical;
    v[size_t(pdim)] = 0;
    for (const auto& w : widths) v[size_t(pdim)] += w[t];
    if (product(v, 0, v.size()) != rank_numels[t])
      throw FormatError("tp rank " + std::to_string(t) + " of " + name + " holds " + std::to_string(rank_numels[t]) +
                        " elements, but its recorded shard widths describe a shape of " + py_seq(v, true) + ".");
    views.push_back(std::move(v));
  }
  return views;
}

void average_f32(const std::vector<const float*>& ranks, size_t n, float* out) {
  const float T = float(ranks.size());
  for (size_t i = 0; i < n; ++i) {
    float acc = 0.0f + ranks[0][i];  // sum()'s int start: -0.0 becomes +0.0
    for (size_t t = 1; t < ranks.size(); ++t) acc = acc + ranks[t][i];
    out[i] = acc / T;
  }
}

VocabCut vocab_cut(const Shape& merged, int64_t original_vocab_size, const std::string& name) {
  if (merged.size() < 2)
    throw FormatError(name + ": vocabulary parameter of shape " + py_seq(merged, false) +
                      " has fewer than 2 dimensions (DeepSpeed: IndexError: too many indices for tensor of dimension " +
                      std::to_string(merged.size()) + ")");
  const int64_t rows = merged[0];
  int64_t keep = original_vocab_size < 0 ? std::max<int64_t>(0, rows + original_vocab_size) : original_vocab_size;
  keep = std::min(keep, rows);
  VocabCut v{merged, product(merged, 0, merged.size())};
  v.shape[0] = keep;
  return v;
}

RankBytes::RankBytes(std::vector<pt::Extent> extents) : extents_(std::move(extents)) {
  starts_.reserve(extents_.size() + 1);
  uint64_t at = 0;
  for (const auto& e : extents_) {
    starts_.push_back(at);
    at += e.length;
  }
  starts_.push_back(at);
}

void RankBytes::read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const {
  if (offset + n > size()) throw Error("read past the end of a tensor-parallel slice");
  // The last extent starting at or before `offset` (zero-length extents are skipped by the loop).
  size_t k = size_t(std::upper_bound(starts_.begin(), starts_.end() - 1, offset) - starts_.begin()) - 1;
  auto* dst = static_cast<char*>(out);
  for (size_t done = 0; done < n; ++k) {
    const uint64_t within = offset + done - starts_[k];
    if (within >= extents_[k].length) continue;
    const size_t take = size_t(std::min<uint64_t>(n - done, extents_[k].length - within));
    files.pread(extents_[k].file, extents_[k].offset + within, dst + done, take);
    done += take;
  }
}

namespace {

size_t ranks_memory(const std::vector<RankBytes>& ranks) {
  size_t n = ranks.capacity() * sizeof(RankBytes);
  for (const auto& r : ranks) n += r.memory_bytes();
  return n;
}

// Every rank holds the same number of fp32 elements (rules 1 and 2 compare or combine them element-wise).
void check_same_f32(const std::vector<RankBytes>& ranks, pt::DType dtype, const std::string& name, const char* rule) {
  if (ranks.empty()) throw FormatError(name + ": no tensor-parallel slices");
  if (dtype != pt::DType::F32)
    throw FormatError(name + ": " + rule + " of " + std::string(pt::dtype_name(dtype)) + " states is not supported");
  for (size_t t = 0; t < ranks.size(); ++t)
    if (ranks[t].size() != ranks[0].size() || ranks[t].size() % 4 != 0)
      throw FormatError(name + ": " + rule + ": tp rank " + std::to_string(t) + " holds " +
                        std::to_string(ranks[t].size()) + " bytes, rank 0 holds " + std::to_string(ranks[0].size()));
}

constexpr size_t kChunk = 4096;  // elements per rank read while combining: bounded stack of buffers

}  // namespace

ConcatenatedTensor::ConcatenatedTensor(TpCat cat, std::vector<RankBytes> ranks, pt::DType dtype,
                                       const std::string& name)
    : cat_(std::move(cat)), ranks_(std::move(ranks)), esize_(pt::element_size(dtype)) {
  if (ranks_.size() != cat_.ranks())
    throw FormatError(name + ": " + std::to_string(ranks_.size()) + " tp slices for a merge of " +
                      std::to_string(cat_.ranks()));
  for (uint32_t t = 0; t < ranks_.size(); ++t)
    if (ranks_[t].size() != cat_.rank_numel(t) * esize_)
      throw FormatError(name + ": tp rank " + std::to_string(t) + " holds " + std::to_string(ranks_[t].size()) +
                        " bytes, its slice shape needs " + std::to_string(cat_.rank_numel(t) * esize_));
}

void ConcatenatedTensor::read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const {
  if (n == 0) return;
  if (offset + n > size()) throw Error("read past the end of a merged tensor");
  auto* dst = static_cast<char*>(out);
  for (uint64_t j = cat_.run_containing(offset / esize_), done = 0; done < n; ++j) {
    const TpRun r = cat_.run(j);
    const uint64_t within = offset + done - cat_.run_start(j) * esize_;
    const size_t take = size_t(std::min<uint64_t>(n - done, r.count * esize_ - within));
    ranks_[r.rank].read(r.offset * esize_ + within, dst + done, take, files);
    done += take;
  }
}

size_t ConcatenatedTensor::memory_bytes() const {
  return sizeof(*this) + ranks_memory(ranks_) + cat_.memory_bytes();
}

ElementwiseTensor::ElementwiseTensor(std::vector<RankBytes> ranks, pt::DType dtype, const std::string& name,
                                     const char* rule)
    : ranks_(std::move(ranks)), name_(name) {
  check_same_f32(ranks_, dtype, name, rule);
}

size_t ElementwiseTensor::memory_bytes() const {
  return sizeof(*this) + ranks_memory(ranks_) + name_.capacity();
}

void AveragedTensor::read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const {
  if (offset + n > size()) throw Error(name_ + ": read past the end of an averaged tensor");
  std::vector<std::vector<float>> in(ranks_.size(), std::vector<float>(kChunk));
  std::vector<const float*> ptrs;
  for (const auto& v : in) ptrs.push_back(v.data());
  std::vector<float> avg(kChunk);
  auto* dst = static_cast<char*>(out);
  // Whole elements covering [offset, offset + n), one chunk at a time.
  for (uint64_t e = offset / 4, end = (offset + n + 3) / 4; e < end; e += kChunk) {
    const size_t count = size_t(std::min<uint64_t>(kChunk, end - e));
    for (size_t t = 0; t < ranks_.size(); ++t) ranks_[t].read(e * 4, in[t].data(), count * 4, files);
    average_f32(ptrs, count, avg.data());
    const uint64_t from = std::max(offset, e * 4), to = std::min(offset + n, (e + count) * 4);
    memcpy(dst + (from - offset), reinterpret_cast<const char*>(avg.data()) + (from - e * 4), size_t(to - from));
  }
}

void ReplicatedTensor::read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const {
  if (offset + n > size()) throw Error(name_ + ": read past the end of a replicated tensor");
  ranks_[0].read(offset, out, n, files);
  if (ranks_.size() == 1) return;
  std::vector<float> first(kChunk), other(kChunk);
  for (uint64_t e = offset / 4, end = (offset + n + 3) / 4; e < end; e += kChunk) {
    const size_t count = size_t(std::min<uint64_t>(kChunk, end - e));
    ranks_[0].read(e * 4, first.data(), count * 4, files);
    for (size_t t = 1; t < ranks_.size(); ++t) {
      ranks_[t].read(e * 4, other.data(), count * 4, files);
      for (size_t i = 0; i < count; ++i)
        if (!(first[i] == other[i]))  // torch.equal: by value, so NaN never equals and -0.0 == 0.0
          throw Error(name_ + ": tensor-parallel replicas differ at element " + std::to_string(e + i) + " (rank 0 " +
                      std::to_string(first[i]) + ", rank " + std::to_string(t) + " " + std::to_string(other[i]) +
                      "); DeepSpeed's converter stops here with a bare AssertionError (merge_tp_slices)");
    }
  }
}

}  // namespace zm::ds
