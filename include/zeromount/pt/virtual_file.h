#pragma once
// A file described, not stored: inline header bytes, ranges of source files and zero fill.
// Its size is exact before any source byte is read, and a read touches only what it overlaps.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "zeromount/pt/value.h"

namespace zm::pt {

// Where source bytes come from. The view implements it over its shard table, with identity checks.
class ExtentReader {
 public:
  virtual ~ExtentReader() = default;
  // Reads exactly n bytes of file `file` at `offset` or throws.
  virtual void pread(uint32_t file, uint64_t offset, void* buf, size_t n) const = 0;
};

struct Segment {
  enum Kind : uint8_t { Inline, Stored, Zero };
  uint64_t start = 0;  // offset in the virtual file
  uint64_t length = 0;
  Kind kind = Inline;
  uint32_t file = 0;  // an id in the table the ExtentReader serves
  uint64_t offset = 0;  // Inline: into the blob; Stored: into the file
};

class VirtualFile {
 public:
  void append_inline(std::string_view bytes);
  void append_extent(const Extent& e);
  void append_zero(uint64_t n);
  void reserve(size_t segments) { segs_.reserve(segments); }  // avoids doubling a large file's table

  uint64_t size() const { return size_; }
  const std::vector<Segment>& segments() const { return segs_; }
  // Approximate heap bytes held, for cache accounting.
  size_t memory_bytes() const { return blob_.capacity() + segs_.capacity() * sizeof(Segment) + sizeof(*this); }

  // Copies up to n bytes at `offset`; returns the count (short only at end of file).
  size_t read(uint64_t offset, void* buf, size_t n, const ExtentReader& src) const;

 private:
  std::vector<Segment> segs_;
  std::string blob_;
  uint64_t size_ = 0;
};

}  // namespace zm::pt
