#pragma once
#include <cstddef>
#include <cstdint>

namespace zm::pt {
// CRC-32 (zip polynomial), incremental: pass the previous value to continue. Carry-less
// multiplication where the CPU has it (x86-64 PCLMULQDQ: over 10 GB/s), else slicing-by-8 tables.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

// The CRC-32 of A followed by B from crc32(A), crc32(B) and B's length, in O(log |B|): pieces of
// a record checked out of order (as the verify pass reads them) combine into the record's CRC.
uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);
}  // namespace zm::pt
