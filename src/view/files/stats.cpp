#include "zeromount/view/files/stats.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>

#include "zeromount/ds/state_bytes.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"

namespace zm::view {

namespace {

// One block: its finite values' moments about the block's own mean (two passes over memory that
// is in cache), then merged, so that no element pays a division.
template <typename T>
void add_block(Stats& s, const T* x, size_t count) {
  Stats b;
  double sum = 0, sumsq = 0, lo = INFINITY, hi = -INFINITY;
  uint64_t n = 0, nan = 0, inf = 0;
  for (size_t k = 0; k < count; ++k) {
    const double v = double(x[k]);
    if (!std::isfinite(v)) {
      nan += std::isnan(v);
      inf += std::isinf(v);
      continue;
    }
    ++n;
    sum += v;
    sumsq += v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  b.nan = nan;
  b.inf = inf;
  if (n) {
    b.n = n;
    b.sum = sum;
    b.sumsq = sumsq;
    b.min = lo;
    b.max = hi;
    b.mean = sum / double(n);
    double m2 = 0;
    for (size_t k = 0; k < count; ++k) {
      const double v = double(x[k]);
      if (std::isfinite(v)) m2 += (v - b.mean) * (v - b.mean);
    }
    b.m2 = m2;
  }
  s.merge(b);
}

}  // namespace

std::string stat_text(double v) {
  char b[32];
  snprintf(b, sizeof b, "%16.8e", v);
  return b;
}

void Stats::add(const float* x, size_t count) {
  add_block(*this, x, count);
}

void Stats::add(const double* x, size_t count) {
  add_block(*this, x, count);
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
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if (!(bits >> 31)) return (kBuckets >> 1) + (bits >> 16);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  return (kBuckets >> 1) - ((magnitude + 0xFFFFu) >> 16);
}

double GridHistogram::lower(uint32_t b) {
  constexpr uint32_t half = kBuckets >> 1;
  if (b >= half) return b - half >= 0x7F80u ? INFINITY : double(std::bit_cast<float>((b - half) << 16));
  return -double(std::bit_cast<float>((half - b) << 16));
}

void GridHistogram::add(const float* x, size_t count) {
  for (size_t k = 0; k < count; ++k) {
    if (!std::isfinite(x[k])) continue;
    const uint32_t b = bucket(x[k]);
    ++counts_[b];
    lo_ = std::min(lo_, b);
    hi_ = std::max(hi_, b);
    ++total_;
  }
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
