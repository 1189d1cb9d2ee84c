#pragma once
// The number checks: one streaming pass over every item's values, a block at a time (memory is
// blocks, never tensors), with the report pass's statistics (view::Stats), then the checks that
// read the figures: NaN/inf with the first index, exp_avg_sq below zero, moments all zero while
// step > 0, steps that disagree, 16-bit module weights that are not their masters rounded, and a
// parameter whose norm is far from its siblings'.
#include <cstdint>
#include <string_view>
#include <vector>

#include "zeromount/check/findings.h"
#include "zeromount/check/input.h"
#include "zeromount/view/files/stats.h"

namespace zm::check {

// Reads an item's elements in blocks, widened: floats for the 32- and 16-bit float dtypes, doubles
// for any other (f64, integers), so that nothing rounds what a diff compares.
class ValueBlocks {
 public:
  static constexpr size_t kBlock = 1u << 16;  // elements: 256 KiB of floats, in the L2 cache
  ValueBlocks(const Item& item, const pt::ExtentReader& src);
  bool wide() const { return wide_; }
  // The next block into `f` (float dtypes) or `d` (wide ones); 0 at the end.
  size_t next(std::vector<float>& f, std::vector<double>& d);
  // The raw bytes of the block last read (for bit equality): f32 blocks are read straight into
  // the float block, so these are its bytes then.
  std::string_view raw() const;
  uint64_t bytes_read() const { return read_; }
  uint64_t position() const { return at_; }  // elements read so far

 private:
  const Item& item_;
  const pt::ExtentReader& src_;
  bool wide_;
  uint64_t numel_, at_ = 0, read_ = 0;
  std::vector<char> raw_;
  const std::vector<float>* floats_ = nullptr;  // the block read in place (f32)
  size_t last_ = 0;                             // its elements
};

struct ItemFigures {
  view::Stats stats;  // of the finite values; counts of NaN and inf
  int64_t first_nan = -1, first_inf = -1;
  bool read = false;  // false: no values (a strided view, a read that failed)
  // A 16-bit module weight read together with its fp32 master (module-matches-masters): how many
  // elements are not the master rounded, and the first; master < 0 when it was not compared.
  int64_t master = -1;
  uint64_t not_rounded = 0, first_not_rounded = 0;
  // A packed expert parameter's item (view::packed_experts): sums of squares per expert.
  view::ExpertSums experts;
};

// The pass: one ItemFigures per Input::items entry, each item's bytes read once (a module weight
// in the same blocks as its master), and the zip records' CRCs settled from those reads
// (FileSet::settle_crcs). Adds the bytes read to f.bytes_read.
std::vector<ItemFigures> item_figures(Input& in, Findings& f);

// Every number check, from the figures.
void check_numbers(const Input& in, const std::vector<ItemFigures>& figures, Findings& f);

// The norm rule, for --help and the docs: what `norm-outlier` flags and how it can be wrong.
extern const char* const kNormRule;

// "[2, 17]" for flat element `flat` of `shape`: the first NaN as a person finds it in torch.
std::string index_text(const std::vector<int64_t>& shape, uint64_t flat);

}  // namespace zm::check
