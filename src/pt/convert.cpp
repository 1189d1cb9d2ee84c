#include "zeromount/pt/convert.h"

#include <algorithm>
#include <cstring>

#include "zeromount/pt/error.h"

namespace zm::pt {

uint16_t bf16_from_f32(uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kTorchBf16NaN;
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

uint16_t f16_from_f32(uint32_t w) {
  const uint16_t sign = uint16_t((w >> 16) & 0x8000u);
  const uint32_t a = w & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // 65520 and up round to inf
  if (a >= 0x38800000u) {                       // normal: rebias 127 -> 15, round away 13 bits
    const uint32_t h = a - (112u << 23);
    return sign | uint16_t((h + 0x0FFFu + ((h >> 13) & 1u)) >> 13);
  }
  if (a <= 0x33000000u) return sign;  // at most half the smallest subnormal: the tie goes to even 0
  // Subnormal: the value is m * 2^(e-150); in units of 2^-24 that is m >> (126 - e).
  const uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, shift = 126 - e;
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // may carry into the smallest normal: still right
  return sign | uint16_t(h);
}

uint32_t f32_from_bf16(uint16_t b) {
  return uint32_t(b) << 16;
}

uint32_t f32_from_f16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0);
  if (e != 0) return sign | ((e + 112) << 23) | (m << 13);
  if (m == 0) return sign;
  uint32_t exp = 113;  // 2^-14, the subnormals' scale; normalize the mantissa
  while (!(m & 0x400u)) {
    m <<= 1;
    --exp;
  }
  return sign | (exp << 23) | ((m & 0x3FFu) << 13);
}

namespace {

bool is_float(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16;
}

uint32_t load_as_f32(DType from, const unsigned char* p) {
  if (from == DType::F32) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  uint16_t v;
  memcpy(&v, p, 2);
  return from == DType::BF16 ? f32_from_bf16(v) : f32_from_f16(v);
}

void store_from_f32(DType to, uint32_t v, unsigned char* p) {
  if (to == DType::F32) return (void)memcpy(p, &v, 4);
  const uint16_t h = to == DType::BF16 ? bf16_from_f32(v) : f16_from_f32(v);
  memcpy(p, &h, 2);
}

constexpr uint64_t kChunk = 1 << 16;  // elements converted per source read: bounds the buffer

}  // namespace

bool convertible(DType from, DType to) {
  return is_float(from) && is_float(to);
}

void convert(DType from, const void* src, DType to, void* dst, size_t n) {
  if (!convertible(from, to))
    throw Error("cannot convert " + std::string(dtype_name(from)) + " to " + std::string(dtype_name(to)));
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  const size_t ins = element_size(from), outs = element_size(to);
  if (from == to) return (void)memcpy(d, s, n * ins);
  // Via fp32: exact for widening, and bf16 <-> fp16 then rounds once, as torch's .to does.
  for (size_t k = 0; k < n; ++k) store_from_f32(to, load_as_f32(from, s + k * ins), d + k * outs);
}

ConvertedExtents::ConvertedExtents(std::vector<Extent> source, DType from, DType to, uint64_t numel, std::string origin)
    : source_(std::move(source)), from_(from), to_(to), numel_(numel), origin_(std::move(origin)) {
  if (!convertible(from, to))
    throw FormatError(
        where(origin_, "cannot convert " + std::string(dtype_name(from)) + " to " + std::string(dtype_name(to))));
  const uint64_t es = element_size(from);
  uint64_t have = 0;
  for (const auto& e : source_) {
    if (e.length % es != 0)
      throw FormatError(where(origin_, std::string(dtype_name(from)) + " data of " + std::to_string(e.length) +
                                           " bytes is not whole " + std::to_string(es) + "-byte elements"));
    starts_.push_back(have);
    have += e.length / es;
  }
  if (have < numel_)
    throw FormatError(where(origin_, "holds " + std::to_string(have) + " elements, needs " + std::to_string(numel_)));
}

size_t ConvertedExtents::memory_bytes() const {
  return sizeof(*this) + source_.capacity() * sizeof(Extent) + starts_.capacity() * 8 + origin_.capacity();
}

void ConvertedExtents::convert_elements(uint64_t first, uint64_t count, char* dst, const ExtentReader& files) const {
  const uint64_t ins = element_size(from_), outs = element_size(to_);
  std::vector<unsigned char> buf;
  // The extent holding `first`, then on through the following ones.
  size_t k = size_t(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
  while (count > 0) {
    const Extent& e = source_.at(k);
    const uint64_t skip = first - starts_[k];
    const uint64_t take = std::min({count, e.length / ins - skip, kChunk});
    buf.resize(size_t(take * ins));
    files.pread(e.file, e.offset + skip * ins, buf.data(), buf.size());
    convert(from_, buf.data(), to_, dst, size_t(take));
    dst += take * outs;
    first += take;
    count -= take;
    if (first - starts_[k] == e.length / ins) ++k;
  }
}

void ConvertedExtents::read(uint64_t offset, void* out, size_t n, const ExtentReader& files) const {
  const uint64_t outs = element_size(to_), end = std::min(size(), offset + n);
  if (offset >= end) return;
  char* o = static_cast<char*>(out);
  // Whole elements in the middle go straight to `out`; a partial first or last one via a scratch.
  uint64_t el = offset / outs;
  while (el * outs < end) {
    const uint64_t lo = el * outs;
    if (lo < offset || lo + outs > end) {
      char one[4];
      convert_elements(el, 1, one, files);
      const uint64_t a = std::max(lo, offset), b = std::min(lo + outs, end);
      memcpy(o + (a - offset), one + (a - lo), size_t(b - a));
      ++el;
      continue;
    }
    const uint64_t whole = (end - lo) / outs;
    convert_elements(el, whole, o + (lo - offset), files);
    el += whole;
  }
}

}  // namespace zm::pt
