#pragma once
#include <cstddef>
#include <cstdint>

namespace zm::pt {
// CRC-32 (zip polynomial), incremental: pass the previous value to continue.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
}  // namespace zm::pt
