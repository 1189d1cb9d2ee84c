#include "zeromount/pt/crc32.h"

#include <array>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ZM_CRC_CLMUL 1
#endif

namespace zm::pt {
namespace {

constexpr uint32_t kPoly = 0xEDB88320u;  // the zip polynomial, bit-reflected

// Slicing-by-8: about 1.5 GB/s; the tail of a buffer and machines without carry-less multiply.
constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? kPoly ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  return t;
}
constexpr auto kTables = make_tables();

// On the inverted register, as the loop keeps it.
uint32_t table_crc(const unsigned char* p, size_t n, uint32_t crc) {
  while (n >= 8) {
    const uint32_t lo = crc ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    crc = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^ kTables[4][lo >> 24] ^
          kTables[3][p[4]] ^ kTables[2][p[5]] ^ kTables[1][p[6]] ^ kTables[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) crc = kTables[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

#ifdef ZM_CRC_CLMUL
// Folding with carry-less multiplication (Gopal et al., "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ", Intel 2009; the bit-reflected constants of its appendix, as
// Chromium's zlib uses them): four 128-bit lanes folded 64 bytes at a time, then into one lane,
// then Barrett reduction. `n` is a multiple of 16, at least 64; `crc` is the inverted register.
#define ZM_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

ZM_CLMUL_TARGET inline __m128i load16(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// a folded over 128 bits onto the next 128 (k: the pair of constants for that distance).
ZM_CLMUL_TARGET inline __m128i fold16(__m128i a, __m128i next, __m128i k) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x11), next), _mm_clmulepi64_si128(a, k, 0x00));
}

ZM_CLMUL_TARGET uint32_t clmul_crc(const unsigned char* buf, size_t n, uint32_t crc) {
  alignas(16) static constexpr uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static constexpr uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static constexpr uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
  alignas(16) static constexpr uint64_t poly[] = {0x01db710641, 0x01f7011641};
  __m128i x1 = load16(buf), x2 = load16(buf + 16), x3 = load16(buf + 32), x4 = load16(buf + 48);
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128(int(crc)));
  __m128i x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
  buf += 64;
  n -= 64;
  while (n >= 64) {
    const __m128i x5 = _mm_clmulepi64_si128(x1, x0, 0x00), x6 = _mm_clmulepi64_si128(x2, x0, 0x00),
                  x7 = _mm_clmulepi64_si128(x3, x0, 0x00), x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x5), load16(buf));
    x2 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x2, x0, 0x11), x6), load16(buf + 16));
    x3 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x3, x0, 0x11), x7), load16(buf + 32));
    x4 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x4, x0, 0x11), x8), load16(buf + 48));
    buf += 64;
    n -= 64;
  }
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));
  x1 = fold16(fold16(fold16(x1, x2, x0), x3, x0), x4, x0);
  for (; n >= 16; buf += 16, n -= 16) x1 = fold16(x1, load16(buf), x0);
  // 128 bits to 64, then Barrett reduction to 32.
  const __m128i mask = _mm_setr_epi32(~0, 0, ~0, 0);
  x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
  x0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask), x0, 0x00), x2);
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));
  x2 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask), x0, 0x10), mask);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
  return uint32_t(_mm_extract_epi32(_mm_xor_si128(x1, x2), 1));
}

// Read once, at start-up (a CRC asked for before then takes the tables: the same value).
const bool kHaveClmul = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}();
#endif

// a(x) * b(x) modulo the polynomial, both bit-reflected (zlib's multmodp).
uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(2^k) modulo the polynomial, k = 0..63.
constexpr std::array<uint32_t, 64> make_x2n() {
  std::array<uint32_t, 64> t{};
  uint32_t p = 1u << 30;  // x^1
  for (size_t k = 0; k < t.size(); ++k) {
    t[k] = p;
    // p = p * p mod P, as multmodp (constexpr here).
    uint32_t a = p, b = p, m = 1u << 31, r = 0;
    for (;;) {
      if (a & m) {
        r ^= b;
        if ((a & (m - 1)) == 0) break;
      }
      m >>= 1;
      b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
    }
    p = r;
  }
  return t;
}
constexpr auto kX2n = make_x2n();

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#ifdef ZM_CRC_CLMUL
  if (n >= 64 && kHaveClmul) {
    const size_t whole = n & ~size_t(15);
    crc = clmul_crc(p, whole, crc);
    p += whole;
    n -= whole;
  }
#endif
  return ~table_crc(p, n, crc);
}

uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  // crc(A || B) = crc(A) * x^(8 |B|) + crc(B) modulo the polynomial (zlib's crc32_combine).
  uint32_t shift = 1u << 31;  // x^0
  for (unsigned k = 3; length_b; length_b >>= 1, ++k)
    if (length_b & 1) shift = multmodp(kX2n[k & 63], shift);
  return multmodp(shift, crc_a) ^ crc_b;
}

}  // namespace zm::pt
