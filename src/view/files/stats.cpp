#include "zeromount/view/files/stats.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cstdio>
#include <cstring>

#include "zeromount/ds/state_bytes.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"

namespace zm::view {

namespace {

#if defined(__GNUC__) && !defined(__clang__)
// Every function passing these vectors is internal to this file: the ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Two (four) doubles as one value (GCC's vector extension, which clang shares): D2 is one SSE2
// register on baseline x86-64; D4 is two there and one AVX register in the AVX2 clone of
// Stats::add (target_clones: the same operations in the same order, so the same bits either way).
// Two sets of lanes keep more elements in flight. Selections are written `c ? a : b`, which both
// compilers keep in vector registers.
using D2 = double __attribute__((vector_size(16)));
using F2 = float __attribute__((vector_size(8)));
using D4 = double __attribute__((vector_size(32)));
using F4 = float __attribute__((vector_size(16)));

[[gnu::always_inline]] inline D2 load2(const float* x) {
  F2 f;
  std::memcpy(&f, x, sizeof f);
  return __builtin_convertvector(f, D2);
}

[[gnu::always_inline]] inline D4 load4(const float* x) {
  F4 f;
  std::memcpy(&f, x, sizeof f);
  return __builtin_convertvector(f, D4);
}

[[gnu::always_inline]] inline D4 load4(const double* x) {
  D4 d;
  std::memcpy(&d, x, sizeof d);
  return d;
}

// The statistics of a block whose values are all finite, in one pass: lanes of independent sums,
// the moments taken about a shift (the block's first value) so that a large mean does not cancel
// the variance: m2 = sum(d^2) - sum(d)^2 / n with d = x - shift, exact to rounding while the
// shift lies within a few deviations of the mean. A NaN or inf makes the sum of squares NaN or inf
// (so does a finite double beyond 1e154, squared), and such a block (rare) is computed again by
// careful(): nothing is counted per value. V is D2 or D4: 2W values a step.
template <typename V>
class FiniteBlock {
 public:
  static constexpr size_t W = sizeof(V) / sizeof(double);
  explicit FiniteBlock(double shift) {
    for (size_t j = 0; j < W; ++j) shift_[j] = shift;
  }
  [[gnu::always_inline]] void add(V a, V b) {  // 2W values
    lanes_[0].add(a, shift_);
    lanes_[1].add(b, shift_);
  }
  // The last count % 2W values, padded with the shift (which moves no moment, min or max: it is a
  // value of the block), whose square and count stats() takes back out.
  template <typename T>
  [[gnu::always_inline]] void add_tail(const T* x, size_t n) {
    if (!n) return;
    V a, b;
    for (size_t j = 0; j < W; ++j) {
      a[j] = j < n ? double(x[j]) : shift_[0];
      b[j] = W + j < n ? double(x[W + j]) : shift_[0];
    }
    padding_ = 2 * W - n;
    add(a, b);
  }
  bool all_finite() const {
    double s = 0;
    for (const Lane& l : lanes_)
      for (size_t j = 0; j < W; ++j) s += l.sumsq[j];
    return std::isfinite(s);
  }
  Stats stats(size_t count) const {  // of the `count` values added, when all_finite()
    Stats b;
    b.n = count;
    if (!b.n) return b;
    double s1 = 0, s2 = 0;
    for (const Lane& l : lanes_)
      for (size_t j = 0; j < W; ++j) {
        b.sumsq += l.sumsq[j];
        s1 += l.d1[j];
        s2 += l.d2[j];
        b.min = std::min(b.min, l.lo[j]);
        b.max = std::max(b.max, l.hi[j]);
      }
    b.sumsq -= double(padding_) * shift_[0] * shift_[0];
    b.mean = shift_[0] + s1 / double(b.n);
    b.m2 = std::max(0.0, s2 - s1 * s1 / double(b.n));
    return b;
  }

 private:
  struct Lane {
    V lo = V{} + INFINITY, hi = V{} - INFINITY, sumsq{}, d1{}, d2{};
    [[gnu::always_inline]] void add(V v, V shift) {
      const V d = v - shift;
      sumsq += v * v;
      d1 += d;
      d2 += d * d;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
  };
  V shift_;
  Lane lanes_[2];
  size_t padding_ = 0;
};

// The statistics of value(0) .. value(count - 1), one at a time, for a block that holds NaN or inf:
// the finite values' moments about their mean (two passes), and counts of the others.
template <typename Value>
Stats careful(size_t count, const Value& value) {
  Stats b;
  double sum = 0;
  for (size_t k = 0; k < count; ++k) {
    const double v = value(k);
    if (!std::isfinite(v)) {
      b.nan += std::isnan(v);
      b.inf += std::isinf(v);
      continue;
    }
    ++b.n;
    sum += v;
    b.sumsq += v * v;
    b.min = std::min(b.min, v);
    b.max = std::max(b.max, v);
  }
  if (!b.n) return b;
  b.mean = sum / double(b.n);
  for (size_t k = 0; k < count; ++k)
    if (const double v = value(k); std::isfinite(v)) b.m2 += (v - b.mean) * (v - b.mean);
  return b;
}

template <typename T>
[[gnu::always_inline]] inline void add_block(Stats& s, const T* x, size_t count) {
  if (!count) return;
  FiniteBlock<D4> lanes{double(x[0])};
  size_t k = 0;
  for (; k + 8 <= count; k += 8) lanes.add(load4(x + k), load4(x + k + 4));
  lanes.add_tail(x + k, count - k);
  s.merge(lanes.all_finite() ? lanes.stats(count) : careful(count, [x](size_t j) { return double(x[j]); }));
}

double update_size(double m, double v, double eps) {
  return std::fabs(m) / (std::sqrt(v) + eps);
}

}  // namespace

std::string stat_text(double v) {
  char b[32];
  snprintf(b, sizeof b, "%16.8e", v);
  return b;
}

// The one hot loop of verify and the report pages: an AVX2 clone where the CPU has it. Not under
// the sanitizers: a clone's ifunc resolver runs while the dynamic loader relocates the binary,
// before their runtime is set up, and crashes there (TSan's unit_tests died before main).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define ZM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ZM_CLONES
#endif

ZM_CLONES void Stats::add(const float* x, size_t count) {
  add_block(*this, x, count);
}

ZM_CLONES void Stats::add(const double* x, size_t count) {
  add_block(*this, x, count);
}

ExpertSums::ExpertSums(uint64_t experts, uint64_t numel) {
  if (!experts || numel % experts) return;  // not packed, or not E equal slices: plain Stats
  sumsq_.assign(experts, 0);
  per_ = numel / experts;
}

template <typename T>
void ExpertSums::add_pieces(Stats& s, const T* x, size_t count) {
  while (count) {
    const uint64_t e = at_ / per_;
    const size_t n = size_t(std::min<uint64_t>(count, (e + 1) * per_ - at_));
    Stats piece;
    piece.add(x, n);
    if (e < sumsq_.size()) sumsq_[e] += piece.sumsq;
    s.merge(piece);
    x += n;
    count -= n;
    at_ += n;
  }
}

void ExpertSums::add(Stats& s, const float* x, size_t count) {
  if (packed())
    add_pieces(s, x, count);
  else
    s.add(x, count);
}

void ExpertSums::add(Stats& s, const double* x, size_t count) {
  if (packed())
    add_pieces(s, x, count);
  else
    s.add(x, count);
}

void add_update_sizes(Stats& stats, const float* m, const float* v, double eps, size_t count, float* out) {
  if (!count) return;
  // Two values at a time; sqrt one by one (a vector sqrt has no portable spelling), which with
  // errno left alone (-fno-math-errno for this file) needs no branch.
  auto two = [eps](size_t k, const float* m, const float* v) {
    const D2 mk = load2(m + k), vk = load2(v + k);
    return (mk < 0.0 ? -mk : mk) / (D2{std::sqrt(vk[0]), std::sqrt(vk[1])} + eps);
  };
  auto put = [out](size_t k, D2 u) {  // each size rounded once to float
    const F2 f = __builtin_convertvector(u, F2);
    std::memcpy(out + k, &f, sizeof f);
  };
  auto one = [=](size_t k) { return update_size(double(m[k]), double(v[k]), eps); };
  FiniteBlock<D2> lanes{one(0)};
  size_t k = 0;
  for (; k + 4 <= count; k += 4) {
    const D2 a = two(k, m, v), b = two(k + 2, m, v);
    lanes.add(a, b);
    put(k, a);
    put(k + 2, b);
  }
  double tail[4];
  for (size_t j = 0; k + j < count; ++j) out[k + j] = float(tail[j] = one(k + j));
  lanes.add_tail(tail, count - k);
  stats.merge(lanes.all_finite() ? lanes.stats(count) : careful(count, one));
}

void Stats::merge(const Stats& o) {
  nan += o.nan;
  inf += o.inf;
  if (!o.n) return;
  if (!n) {
    const uint64_t keep_nan = nan, keep_inf = inf;
    *this = o;
    nan = keep_nan;
    inf = keep_inf;
    return;
  }
  const double na = double(n), nb = double(o.n), total = na + nb;
  const double delta = o.mean - mean;
  mean += delta * nb / total;
  m2 += o.m2 + delta * delta * na * nb / total;
  n += o.n;
  sum += o.sum;
  sumsq += o.sumsq;
  min = std::min(min, o.min);
  max = std::max(max, o.max);
}

// Buckets are ordered by value: non-negative x by its upper 16 bits (rounding down), negative x by
// its magnitude's upper 16 bits rounded up, so that every bucket is [lower(b), lower(b + 1)).
uint32_t GridHistogram::bucket(float x) {
  // Without a branch: the sign of weights is a coin toss, and a mispredicted branch per value
  // cost more than the rest of the count.
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t negative = 0u - (bits >> 31);                              // all ones for x < 0
  const uint32_t up = ((bits & 0x7FFFFFFFu) + (negative & 0xFFFFu)) >> 16;  // magnitude, rounded up if x < 0
  return (kBuckets >> 1) + ((up ^ negative) - negative);                    // half + up, or half - up
}

double GridHistogram::lower(uint32_t b) {
  constexpr uint32_t half = kBuckets >> 1;
  if (b >= half) return b - half >= 0x7F80u ? INFINITY : double(std::bit_cast<float>((b - half) << 16));
  return -double(std::bit_cast<float>((half - b) << 16));
}

void GridHistogram::add(const float* x, size_t count) {
  // Locals, not members: a count written through counts_ could alias them, and would make every
  // value reload and store them.
  uint64_t* counts = counts_.data();
  uint32_t lo = lo_, hi = hi_;
  uint64_t total = 0;
  for (size_t k = 0; k < count; ++k) {
    if ((std::bit_cast<uint32_t>(x[k]) & 0x7F800000u) == 0x7F800000u) continue;  // NaN or inf
    const uint32_t b = bucket(x[k]);
    ++counts[b];
    lo = std::min(lo, b);
    hi = std::max(hi, b);
    ++total;
  }
  lo_ = lo;
  hi_ = hi;
  total_ += total;
}

void GridHistogram::merge(const GridHistogram& o) {
  for (uint32_t b = o.lo_; o.total_ && b <= o.hi_; ++b) counts_[b] += o.counts_[b];
  if (!o.total_) return;
  lo_ = std::min(lo_, o.lo_);
  hi_ = std::max(hi_, o.hi_);
  total_ += o.total_;
}

void GridHistogram::clear() {
  if (total_) std::fill(counts_.begin() + lo_, counts_.begin() + hi_ + 1, 0);
  total_ = 0;
  lo_ = kBuckets;
  hi_ = 0;
}

uint64_t GridHistogram::count(uint32_t from, uint32_t to) const {
  uint64_t c = 0;
  for (uint32_t b = std::max(from, lo_); b < to && b <= hi_; ++b) c += counts_[b];
  return c;
}

uint32_t GridHistogram::bucket_of_rank(uint64_t k) const {
  for (uint32_t b = lo_; b <= hi_; ++b) {
    if (k < counts_[b]) return b;
    k -= counts_[b];
  }
  throw Error("rank past the values counted", EINVAL);
}

StateReader::StateReader(const MountedTag& t, const ds::Param& p, std::vector<size_t> states)
    : dtype_(t.index->master_dtype), element_size_(pt::element_size(dtype_)), numel_(p.numel) {
  for (size_t s : states) {
    bytes_.emplace_back();
    ds::state_bytes(*t.index, p, s, t.mapper(), bytes_.back());  // a parallel merge may be computed: read it as a file
  }
}

size_t StateReader::next(const pt::ExtentReader& src, std::vector<std::vector<float>>& out) {
  const size_t n = size_t(std::min<uint64_t>(numel_ - at_, kBlock));
  out.resize(bytes_.size());
  for (size_t k = 0; k < bytes_.size() && n; ++k) {
    out[k].resize(n);
    const uint64_t offset = at_ * element_size_;
    if (dtype_ == pt::DType::F32) {
      if (bytes_[k].read(offset, out[k].data(), n * 4, src) != n * 4) throw Error("short state read", EIO);
    } else {
      raw_.resize(n * element_size_);
      if (bytes_[k].read(offset, raw_.data(), raw_.size(), src) != raw_.size()) throw Error("short state read", EIO);
      pt::convert(dtype_, raw_.data(), pt::DType::F32, out[k].data(), n);
    }
    read_ += n * element_size_;
  }
  at_ += n;
  return n;
}

}  // namespace zm::view
