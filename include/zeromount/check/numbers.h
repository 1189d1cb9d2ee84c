#pragma once
// The number checks: one streaming pass over every item's values, a block at a time (memory is
// blocks, never tensors), with the report pass's statistics (view::Stats), then the checks that
// read the figures: NaN/inf with the first index, exp_avg_sq below zero, moments all zero while
// step > 0, steps that disagree, 16-bit module weights that are not their masters rounded, and a
// parameter whose norm is far from its siblings'.
#include <cstdint>
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
  // The raw bytes of the block last read (for bit equality).
  const std::vector<char>& raw() const { return raw_; }
  uint64_t bytes_read() const { return read_; }
  uint64_t position() const { return at_; }  // elements read so far

 private:
  const Item& item_;
  const pt::ExtentReader& src_;
  bool wide_;
  uint64_t numel_, at_ = 0, read_ = 0;
  std::vector<char> raw_;
};

struct ItemFigures {
  view::Stats stats;  // of the finite values; counts of NaN and inf
  int64_t first_nan = -1, first_inf = -1;
  bool read = false;  // false: no values (a strided view, a read that failed)
};

// The pass: one ItemFigures per Input::items entry. Adds the bytes read to f.bytes_read.
std::vector<ItemFigures> item_figures(const Input& in, Findings& f);

// Every number check, from the figures (and, for module-matches-masters, a second pass over the
// module weights and their masters together).
void check_numbers(const Input& in, const std::vector<ItemFigures>& figures, Findings& f);

// The norm rule, for --help and the docs: what `norm-outlier` flags and how it can be wrong.
extern const char* const kNormRule;

// "[2, 17]" for flat element `flat` of `shape`: the first NaN as a person finds it in torch.
std::string index_text(const std::vector<int64_t>& shape, uint64_t flat);

}  // namespace zm::check
