#pragma once
// ds_to_universal.py's tensor-parallel merge rules [tp §4.3, §4.4] as
// arithmetic over the ranks' local tensors L_t, so that a merged tensor is served from the shards
// on read instead of being built. Every rule but the average only rearranges bytes.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeromount/pt/dtype.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::ds {

using Shape = std::vector<int64_t>;

// A run of the merged row-major tensor that comes from one rank: elements
// [offset, offset + count) of rank `rank`'s flat local tensor.
struct TpRun {
  uint32_t rank = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
};

// The merged tensor of a concatenation along one dimension, as runs generated from a handful of
// numbers: memory O(T · sub-parameters), never one entry per run (a row-parallel 4096 x 11008
// weight at TP 8 is 32,768 runs). Run j covers output elements [run_start(j), run_start(j + 1)).
class TpCat {
 public:
  // Rules 5 and 6: torch.cat(slices, dim). Slices must agree outside `dim`; their sizes along
  // `dim` may differ (an uneven vocabulary split, 19 + 18 rows).
  static TpCat concat(const std::vector<Shape>& slices, int dim);
  // Rule 3 (parameter_with_2_sub_params_cat_dim_0, SwiGLU): each L_t is torch.chunk(L_t, 2, 0);
  // the result is [chunk 0 of every rank, chunk 1 of every rank] on dim 0.
  static TpCat two_sub_params(const std::vector<Shape>& slices);
  // Rule 4 (parameter_with_sub_params): `views` are the ranks' tensors viewed as their rank shapes;
  // sub-parameter k takes widths[k][t] indices of rank t along `dim`, after that rank's earlier
  // sub-parameters. Result: for each k, for each t, that piece, concatenated on `dim`.
  static TpCat sub_params(const std::vector<Shape>& views, int dim, const std::vector<std::vector<int64_t>>& widths);

  const Shape& shape() const { return shape_; }
  uint64_t numel() const { return outer_ * row_; }
  uint64_t num_runs() const { return outer_ * pieces_.size(); }
  TpRun run(uint64_t j) const;
  uint64_t run_start(uint64_t j) const;
  // The run holding output element `element` (< numel()), found without walking from the start.
  uint64_t run_containing(uint64_t element) const;
  // Elements of each rank's local tensor, which its extents must hold exactly.
  uint64_t rank_numel(uint32_t rank) const { return outer_ * uint64_t(rank_dim_[rank]) * inner_; }
  size_t ranks() const { return rank_dim_.size(); }
  size_t memory_bytes() const {
    return shape_.capacity() * 8 + rank_dim_.capacity() * 8 + pieces_.capacity() * sizeof(Piece) +
           piece_start_.capacity() * 8;
  }

 private:
  struct Piece {
    uint32_t rank;
    int64_t start, width;  // along the cat dimension, in the rank's slice
  };
  TpCat(Shape shape, int dim, std::vector<int64_t> rank_dim, std::vector<Piece> pieces);

  Shape shape_;
  uint64_t outer_ = 0, inner_ = 0, row_ = 0;  // row_: output elements per outer index
  std::vector<int64_t> rank_dim_;             // each rank's size along the cat dimension
  std::vector<Piece> pieces_;                 // in output order within one outer index
  std::vector<uint64_t> piece_start_;         // element offset of each piece within a row
};

// Rule 4's shapes (UCP >= 0.4): the published SubparamShape `shape` has, at `partition_dim`, the
// tuple of sub-parameter sizes; other entries are sizes or one -1. Resolves the logical shape from
// the ranks' total elements and returns each rank's view shape (partition_dim = Σ_k widths[k][t]),
// with ds_to_universal.py's checks and messages.
struct SubParamShape {
  std::vector<Shape> entries;  // one element per dimension; the partition_dim entry lists the sub-parameter sizes
  int partition_dim = 0;
};
std::vector<Shape> sub_param_views(const SubParamShape& spec, const std::vector<std::vector<int64_t>>& widths,
                                   const std::vector<uint64_t>& rank_numels, const std::string& name);

// Rule 2 (parameter_to_average_patterns): `sum(slices) / len(slices)` in fp32. Python's sum starts
// from the int 0, so the first add turns -0.0 into +0.0; then each rank in order, rounding after
// every add; then one true division by T (not a multiply by 1/T: torch divides fp32 exactly).
void average_f32(const std::vector<const float*>& ranks, size_t n, float* out);

// Vocabulary rule: `param[:original_vocab_size, :]`. A view: the size of dim 0 is cut (Python
// slice semantics: clamped, negative counts from the end) while the storage keeps the whole merged
// tensor, padding rows included [tp §10.3], at the same strides.
struct VocabCut {
  Shape shape;
  uint64_t storage_numel = 0;
};
VocabCut vocab_cut(const Shape& merged, int64_t original_vocab_size, const std::string& name);

// A rank's flat local tensor L_t, whose bytes may lie in several extents (its ZeRO-DP fragments).
class RankBytes {
 public:
  explicit RankBytes(std::vector<pt::Extent> extents);
  uint64_t size() const { return starts_.back(); }
  void read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const;
  size_t memory_bytes() const { return extents_.capacity() * (sizeof(pt::Extent) + sizeof(uint64_t)); }

 private:
  std::vector<pt::Extent> extents_;
  std::vector<uint64_t> starts_;  // starts_[k]: offset of extent k; back(): total
};

// Rules 3-6 served lazily: the merged tensor's bytes, read rank by rank through the run generator.
class ConcatenatedTensor : public pt::Computed {
 public:
  ConcatenatedTensor(TpCat cat, std::vector<RankBytes> ranks, pt::DType dtype, const std::string& name);
  uint64_t size() const override { return cat_.numel() * esize_; }
  void read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const override;
  size_t memory_bytes() const override;

 private:
  TpCat cat_;
  std::vector<RankBytes> ranks_;
  uint64_t esize_;
};

// Rules 1 and 2 combine the ranks' copies element by element: every rank holds the same number
// of fp32 elements, checked when made.
class ElementwiseTensor : public pt::Computed {
 public:
  uint64_t size() const override { return ranks_[0].size(); }
  size_t memory_bytes() const override;

 protected:
  ElementwiseTensor(std::vector<RankBytes> ranks, pt::DType dtype, const std::string& name, const char* rule);
  std::vector<RankBytes> ranks_;
  std::string name_;
};

// Rule 2 served lazily (fp32 only: the states DeepSpeed averages are fp32 master weights and moments).
class AveragedTensor : public ElementwiseTensor {
 public:
  AveragedTensor(std::vector<RankBytes> ranks, pt::DType dtype, const std::string& name)
      : ElementwiseTensor(std::move(ranks), dtype, name, "averaging") {}
  void read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const override;
};

// Rule 1: rank 0's copy. DeepSpeed asserts `L_0.equal(L_t)` for every t (a bare AssertionError);
// this serves L_0 and checks, on each read, that the other ranks hold equal values in that range
// (torch.equal compares values: -0.0 equals 0.0, NaN equals nothing). fp32 only.
class ReplicatedTensor : public ElementwiseTensor {
 public:
  ReplicatedTensor(std::vector<RankBytes> ranks, pt::DType dtype, const std::string& name)
      : ElementwiseTensor(std::move(ranks), dtype, name, "a tp-replicated parameter") {}
  void read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const override;
};

}  // namespace zm::ds
