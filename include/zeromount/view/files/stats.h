#pragma once
// What the browsing files say about a parameter's values (info, the report pages), computed in
// streaming passes over the shards with bounded memory: statistics of the finite values, counts
// of what is not finite, and counts by value on a fixed grid (for histograms and medians).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

// Statistics of the finite values, plus counts of what is not finite: an all-NaN parameter must
// say so, not "min inf, max -inf". Blocks are merged with Chan's formula, so that the variance
// stays exact to rounding over billions of elements.
struct Stats {
  double min = INFINITY, max = -INFINITY, mean = 0, m2 = 0, sum = 0, sumsq = 0;
  uint64_t n = 0, nan = 0, inf = 0;
  void add(const float* x, size_t count);
  void add(const double* x, size_t count);
  void merge(const Stats& o);
  // NaN when no value is finite: a number that was not computed is never shown as one.
  double lowest() const { return n ? min : NAN; }
  double highest() const { return n ? max : NAN; }
  double average() const { return n ? mean : NAN; }
  double deviation() const { return n ? std::sqrt(m2 / double(n)) : NAN; }  // population (numpy's std)
  double l2() const { return n ? std::sqrt(sumsq) : NAN; }
};

// The sums of squares per expert of a packed expert parameter (number_rules.h: packed_experts), in
// the same pass as its Stats: each expert is a contiguous slice of the flat elements, so a block is
// added to the Stats in pieces cut where a slice ends, and each piece's sum of squares (of its
// finite values, as Stats::l2) is also the expert's. Nothing is read or computed twice, and the
// memory is one double per expert. Not packed (experts 0): add() is Stats::add.
class ExpertSums {
 public:
  ExpertSums() = default;
  ExpertSums(uint64_t experts, uint64_t numel);
  // The next `count` elements, in order.
  void add(Stats& s, const float* x, size_t count);
  void add(Stats& s, const double* x, size_t count);
  bool packed() const { return !sumsq_.empty(); }
  const std::vector<double>& sumsq() const { return sumsq_; }  // by expert
  uint64_t per_expert() const { return per_; }                 // elements of each

 private:
  template <typename T>
  void add_pieces(Stats& s, const T* x, size_t count);
  std::vector<double> sumsq_;
  uint64_t per_ = 0, at_ = 0;
};

// The size of Adam's update, |m| / (sqrt(v) + eps), of `count` elements, computed in double: its
// statistics added to `stats`, and each size rounded once to float into `out` (the grid counts floats).
void add_update_sizes(Stats& stats, const float* m, const float* v, double eps, size_t count, float* out);

// A statistic as info and the report pages print it: "%16.8e", 16 characters for any double
// (NaN and inf included), so that a file's size does not depend on its values.
std::string stat_text(double v);

// Counts of finite values by their place on the bfloat16 grid: 65,536 ordered buckets, bucket b
// holding [lower(b), lower(b + 1)). Every value read is counted (no sampling), in fixed memory;
// a median or a histogram whose edges are bucket boundaries is then exact for those edges, and a
// rank falls in a bucket at most 2^-7 of its value wide (bfloat16 keeps 7 mantissa bits).
class GridHistogram {
 public:
  static constexpr uint32_t kBuckets = 1u << 16;
  static uint32_t bucket(float x);  // x finite
  static double lower(uint32_t b);  // b in [0, kBuckets]; lower(kBuckets) is +inf
  GridHistogram() : counts_(kBuckets) {}
  void add(const float* x, size_t count);  // skips NaN and inf
  void merge(const GridHistogram& o);
  void clear();
  uint64_t total() const { return total_; }
  uint32_t first() const { return lo_; }  // the occupied buckets are [first(), last()]; total() > 0
  uint32_t last() const { return hi_; }
  uint64_t count(uint32_t from, uint32_t to) const;  // buckets [from, to)
  // The bucket of the k-th smallest value counted (0-based, k < total()).
  uint32_t bucket_of_rank(uint64_t k) const;

 private:
  std::vector<uint64_t> counts_;
  uint64_t total_ = 0;
  uint32_t lo_ = kBuckets, hi_ = 0;
};

// Reads states `states` of a parameter together, a block of elements at a time, as float32
// (16-bit states widened exactly): one streaming pass, whatever the source's layout (fragments of
// ranks, a tensor-parallel merge computed on read). A block is 128 KiB per state.
class StateReader {
 public:
  static constexpr size_t kBlock = 1u << 15;  // elements: the states of a block stay in the L2 cache
  StateReader(const MountedTag& t, const ds::Param& p, std::vector<size_t> states);
  // Fills out[k] with the next block of states[k]; returns how many elements (0 at the end).
  size_t next(const pt::ExtentReader& src, std::vector<std::vector<float>>& out);
  uint64_t bytes_read() const { return read_; }

 private:
  pt::DType dtype_;
  size_t element_size_;
  std::vector<pt::VirtualFile> bytes_;
  uint64_t numel_ = 0, at_ = 0, read_ = 0;
  std::vector<char> raw_;
};

}  // namespace zm::view
