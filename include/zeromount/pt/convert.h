#pragma once
// Precision changes between fp32 and the 16-bit training dtypes, bit-exact with torch on x86 CPUs,
// so that a view can serve bf16/fp16 weights made from fp32 masters (or fp32 from 16-bit weights).
#include <cstdint>
#include <string>
#include <vector>

#include "zeromount/pt/dtype.h"
#include "zeromount/pt/value.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::pt {

// The NaN torch's vectorized CPU kernel (AVX2/AVX-512, what Tensor.to and copy_ run) writes for
// every fp32 NaN. Its scalar path (0-d tensors, c10::BFloat16) writes 0x7FC0 instead, and CUDA
// yet another payload: no 16-bit NaN is "the" rounding of an fp32 NaN.
constexpr uint16_t kTorchBf16NaN = 0xFFFF;

// Round to nearest, ties to even (c10 round_to_nearest_even); NaN -> kTorchBf16NaN.
uint16_t bf16_from_f32(uint32_t f32_bits);
// IEEE binary16, round to nearest even: overflow -> inf, gradual underflow to subnormals and
// zero, NaN -> quiet NaN 0x7E00 with the sign kept (as torch's .half()).
uint16_t f16_from_f32(uint32_t f32_bits);
uint32_t f32_from_bf16(uint16_t bits);  // exact (the upper half of an fp32)
uint32_t f32_from_f16(uint16_t bits);   // exact; a signalling NaN comes back quiet, payload kept

bool convertible(DType from, DType to);  // any pair of F32, BF16, F16
// n elements of dtype `from` at `src` to dtype `to` at `dst` (little-endian, unaligned is fine).
void convert(DType from, const void* src, DType to, void* dst, size_t n);

// A tensor in dtype `to` whose elements are the conversion of `numel` elements stored in dtype
// `from` as the concatenation of `source` (cut to numel, like PlainTensor::data). Reads only the
// source bytes a read overlaps, so a 16-bit view of a 100 GB fp32 master costs nothing up front.
class ConvertedExtents : public Computed {
 public:
  // `origin` names the source in errors ("file: key 'module.fc1.weight'"). Throws FormatError when
  // an extent is not whole elements (an odd byte count for a 16-bit source) or holds too few.
  ConvertedExtents(std::vector<Extent> source, DType from, DType to, uint64_t numel, std::string origin);
  uint64_t size() const override { return numel_ * element_size(to_); }
  void read(uint64_t offset, void* out, size_t n, const ExtentReader& files) const override;
  size_t memory_bytes() const override;

 private:
  // Converts elements [first, first + count) into `dst`.
  void convert_elements(uint64_t first, uint64_t count, char* dst, const ExtentReader& files) const;
  std::vector<Extent> source_;
  std::vector<uint64_t> starts_;  // first element of each extent
  DType from_, to_;
  uint64_t numel_;
  std::string origin_;
};

}  // namespace zm::pt
