// Precision conversion against torch: the edge-case bits below were computed at authoring time with
// /usr/bin/python3 and torch 2.x on x86 (x.to(torch.bfloat16), x.half(), y.float() of 1-D tensors),
// and the real 16-bit fixtures' module weights must be the rounded fp32 masters, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"

namespace zm::test {
namespace {

struct Narrowing {
  uint32_t f32;
  uint16_t bf16, f16;
};
// zero, -zero, one, +-inf, NaNs (quiet, signalling, payloads, negative), fp32 max, fp32 subnormals,
// ties at both widths, fp16 max and the overflow threshold, fp16 subnormal and underflow edges.
constexpr Narrowing kNarrowing[] = {
    {0x00000000u, 0x0000, 0x0000}, {0x80000000u, 0x8000, 0x8000}, {0x3f800000u, 0x3f80, 0x3c00},
    {0x7f800000u, 0x7f80, 0x7c00}, {0xff800000u, 0xff80, 0xfc00}, {0x7fc00000u, 0xffff, 0x7e00},
    {0xffc00000u, 0xffff, 0xfe00}, {0x7f800001u, 0xffff, 0x7e00}, {0x7fbfffffu, 0xffff, 0x7e00},
    {0xffffffffu, 0xffff, 0xfe00}, {0x7f7fffffu, 0x7f80, 0x7c00}, {0x00000001u, 0x0000, 0x0000},
    {0x807fffffu, 0x8080, 0x8000}, {0x00800000u, 0x0080, 0x0000}, {0x3f808000u, 0x3f80, 0x3c04},
    {0x3f818000u, 0x3f82, 0x3c0c}, {0x3f808001u, 0x3f81, 0x3c04}, {0x3f80ffffu, 0x3f81, 0x3c08},
    {0x477fe000u, 0x4780, 0x7bff}, {0x477ff000u, 0x4780, 0x7c00}, {0x477fefffu, 0x4780, 0x7bff},
    {0x33800000u, 0x3380, 0x0001}, {0x33000000u, 0x3300, 0x0000}, {0x33000001u, 0x3300, 0x0001},
    {0x387fc000u, 0x3880, 0x03ff}, {0x38800000u, 0x3880, 0x0400}, {0x387fe000u, 0x3880, 0x0400},
    {0x47800000u, 0x4780, 0x7c00}, {0x3e2aaaabu, 0x3e2b, 0x3155}, {0xc0490fdbu, 0xc049, 0xc248},
};

struct Widening {
  uint16_t bits;
  uint32_t from_f16, from_bf16;
};
constexpr Widening kWidening[] = {
    {0x0000, 0x00000000u, 0x00000000u}, {0x8000, 0x80000000u, 0x80000000u}, {0x0001, 0x33800000u, 0x00010000u},
    {0x03ff, 0x387fc000u, 0x03ff0000u}, {0x0400, 0x38800000u, 0x04000000u}, {0x3c00, 0x3f800000u, 0x3c000000u},
    {0x7bff, 0x477fe000u, 0x7bff0000u}, {0x7c00, 0x7f800000u, 0x7c000000u}, {0xfc00, 0xff800000u, 0xfc000000u},
    {0x7c01, 0x7fc02000u, 0x7c010000u}, {0x7e00, 0x7fc00000u, 0x7e000000u}, {0x7fff, 0x7fffe000u, 0x7fff0000u},
    {0xfe00, 0xffc00000u, 0xfe000000u}, {0x3555, 0x3eaaa000u, 0x35550000u},
};

TEST(Convert, NarrowingMatchesTorch) {
  for (const auto& c : kNarrowing) {
    EXPECT_EQ(pt::bf16_from_f32(c.f32), c.bf16) << std::hex << c.f32;
    EXPECT_EQ(pt::f16_from_f32(c.f32), c.f16) << std::hex << c.f32;
  }
}

TEST(Convert, WideningMatchesTorch) {
  for (const auto& c : kWidening) {
    EXPECT_EQ(pt::f32_from_f16(c.bits), c.from_f16) << std::hex << c.bits;
    EXPECT_EQ(pt::f32_from_bf16(c.bits), c.from_bf16) << std::hex << c.bits;
  }
}

// Every fp16 value survives fp16 -> fp32 -> fp16 (NaNs as the quiet NaN of their sign).
TEST(Convert, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    const uint16_t want = nan ? uint16_t((h & 0x8000) | 0x7e00) : uint16_t(h);
    ASSERT_EQ(pt::f16_from_f32(pt::f32_from_f16(uint16_t(h))), want) << std::hex << h;
  }
}

class Bytes : public pt::ExtentReader {
 public:
  explicit Bytes(std::string b) : b_(std::move(b)) {}
  void pread(uint32_t, uint64_t offset, void* buf, size_t n) const override {
    ASSERT_LE(offset + n, b_.size());
    memcpy(buf, b_.data() + offset, n);
  }

 private:
  std::string b_;
};

std::string f32_bytes(const std::vector<uint32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(ConvertedExtents, AnySliceEqualsTheWholeConversion) {
  std::vector<uint32_t> src;
  for (const auto& c : kNarrowing) src.push_back(c.f32);
  const Bytes files(f32_bytes(src));
  // Two extents, the second one starting mid-file, and one element past numel to cut.
  const uint64_t n = src.size() - 1;
  const pt::ConvertedExtents bf16({{0, 0, 40}, {0, 40, (n + 1) * 4 - 40}}, pt::DType::F32, pt::DType::BF16, n, "t");
  ASSERT_EQ(bf16.size(), n * 2);
  std::string whole(n * 2, '\0');
  bf16.read(0, whole.data(), whole.size(), files);
  for (uint64_t k = 0; k < n; ++k) {
    uint16_t v;
    memcpy(&v, whole.data() + 2 * k, 2);
    EXPECT_EQ(v, kNarrowing[k].bf16) << k;
  }
  for (uint64_t off = 0; off < whole.size(); ++off)
    for (uint64_t len : {1, 2, 3, 7, 40}) {
      std::string part(len, '\x55');
      const uint64_t got = std::min(len, whole.size() - off);
      bf16.read(off, part.data(), len, files);
      EXPECT_EQ(part.substr(0, got), whole.substr(off, got)) << off << "+" << len;
    }
}

TEST(ConvertedExtents, WidensHalves) {
  std::string src;
  for (const auto& c : kWidening) src.append(reinterpret_cast<const char*>(&c.bits), 2);
  const Bytes files(src);
  const pt::ConvertedExtents f32({{0, 0, src.size()}}, pt::DType::F16, pt::DType::F32, std::size(kWidening), "h");
  std::string out(f32.size(), '\0');
  f32.read(0, out.data(), out.size(), files);
  for (size_t k = 0; k < std::size(kWidening); ++k) {
    uint32_t v;
    memcpy(&v, out.data() + 4 * k, 4);
    EXPECT_EQ(v, kWidening[k].from_f16) << k;
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(ConvertedExtents, OddBf16ByteCountIsRefused) {
  const std::string origin = "mp_rank_00_model_states.pt: key 'module.fc1.bias'";
  const std::string err = error_of([&] {
    pt::ConvertedExtents({{0, 0, 61}}, pt::DType::BF16, pt::DType::F32, 30, origin);
  });
  EXPECT_NE(err.find(origin), std::string::npos) << err;
  EXPECT_NE(err.find("61 bytes"), std::string::npos) << err;
  EXPECT_NE(error_of([] { pt::ConvertedExtents({{0, 0, 40}}, pt::DType::F32, pt::DType::BF16, 11, "x"); }), "");
  EXPECT_NE(error_of([] { pt::ConvertedExtents({{0, 0, 40}}, pt::DType::I64, pt::DType::BF16, 5, "x"); }), "");
}

// The module weights a 16-bit run saved are the RNE rounding of its fp32 masters: served through
// ConvertedExtents from the index's fp32 fragments, they come out equal to the stored bytes.
class SixteenBit : public ::testing::TestWithParam<std::string> {};

TEST_P(SixteenBit, ModuleWeightsAreTheRoundedMaster) {
  auto ix = ds::index_tag(kFixtures + "/" + GetParam() + "/checkpoint/global_step3");
  std::vector<std::string> paths;
  for (const auto& s : ix->shards) paths.push_back(s.path);
  const PathSource files(paths);
  ASSERT_EQ(ix->module_weights.size(), ix->params.size());
  EXPECT_EQ(ix->master_dtype, pt::DType::F32);
  for (size_t k = 0; k < ix->params.size(); ++k) {
    const ds::Param& p = ix->params[k];
    const ds::PlainTensor& w = ix->module_weights[k];
    SCOPED_TRACE(p.name);
    EXPECT_EQ(w.name, p.name);
    EXPECT_EQ(w.dtype, ix->module_dtype);
    std::vector<pt::Extent> master;
    for (const auto& f : ix->fragments(p, 0)) master.push_back(f.extent);
    const pt::ConvertedExtents lp(master, ix->master_dtype, w.dtype, p.numel, p.name);
    std::string ours(lp.size(), '\0');
    lp.read(0, ours.data(), ours.size(), files);
    std::string stored;
    for (const auto& e : w.data) {
      std::string b(e.length, '\0');
      files.pread(e.file, e.offset, b.data(), b.size());
      stored += b;
    }
    EXPECT_EQ(ours, stored);
  }
}

INSTANTIATE_TEST_SUITE_P(Real, SixteenBit,
                         ::testing::Values("z2_ws2_bf16_pg2", "z1_ws2_bf16_pg2_fp32acc", "z2_ws2_fp16_pg2"));

}  // namespace
}  // namespace zm::test
