#pragma once
// Protocol-2 opcodes as bytes, for the two writers: the value emitter (pickle_writer.cpp) and the
// streamed DCP `.metadata` (dcp.cpp). Each appends to a string; none keeps state.
#include <cstdint>
#include <string>
#include <string_view>

namespace zm::pt::ops {

inline void le(std::string& w, uint64_t v, int n) {
  char b[8];
  for (int k = 0; k < n; ++k) b[k] = char(uint8_t(v >> (8 * k)));
  w.append(b, size_t(n));
}

// A memo opcode: its one-byte form for the first 256 entries, its four-byte form after.
inline void memo(std::string& w, char one_byte, char four_bytes, uint32_t idx) {
  if (idx < 256) {
    w.push_back(one_byte);
    w.push_back(char(uint8_t(idx)));
  } else {
    w.push_back(four_bytes);
    le(w, idx, 4);
  }
}
inline void put(std::string& w, uint32_t idx) {
  memo(w, 'q', 'r', idx);
}  // BINPUT, LONG_BINPUT
inline void get(std::string& w, uint32_t idx) {
  memo(w, 'h', 'j', idx);
}  // BINGET, LONG_BINGET

// An int as CPython's Pickler writes it: BININT1, BININT2, BININT, or LONG1.
inline void integer(std::string& w, int64_t v) {
  if (v >= 0 && v < 256) {
    w.push_back('K');
    w.push_back(char(uint8_t(v)));
  } else if (v >= 0 && v < 65536) {
    w.push_back('M');
    le(w, uint64_t(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    w.push_back('J');
    le(w, uint64_t(v), 4);
  } else {
    // LONG1: minimal little-endian two's complement, as pickle's encode_long.
    std::string b;
    const auto u = uint64_t(v);
    for (int k = 0; k < 8; ++k) b.push_back(char(u >> (8 * k)));
    while (b.size() > 1 && ((b.back() == 0 && !(uint8_t(b[b.size() - 2]) & 0x80)) ||
                            (uint8_t(b.back()) == 0xFF && (uint8_t(b[b.size() - 2]) & 0x80))))
      b.pop_back();
    w.push_back(char(0x8a));
    w.push_back(char(uint8_t(b.size())));
    w += b;
  }
}

inline void str(std::string& w, std::string_view s) {  // BINUNICODE
  w.push_back('X');
  le(w, s.size(), 4);
  w += s;
}

inline void global(std::string& w, std::string_view module, std::string_view name) {  // GLOBAL
  w.push_back('c');
  w += module;
  w.push_back('\n');
  w += name;
  w.push_back('\n');
}

}  // namespace zm::pt::ops
