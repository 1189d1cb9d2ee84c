#pragma once
// A file described, not stored: inline header bytes, ranges of source files, zero fill and
// bytes computed on read. Its size is exact before any source byte is read, and a read touches
// only what it overlaps. A made-up tensor's storage is one too (value.h, MadeStorage).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zm::pt {

// A run of bytes of one source file.
struct Extent {
  uint32_t file = 0;  // an id in the table the ExtentReader serves
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Where source bytes come from. The view implements it over its shard table, with identity checks.
class ExtentReader {
 public:
  virtual ~ExtentReader() = default;
  // Reads exactly n bytes of file `file` at `offset` or throws.
  virtual void pread(uint32_t file, uint64_t offset, void* buf, size_t n) const = 0;
};

// Bytes that exist in no file but are computed from file bytes when read: a precision change,
// an average of tensor-parallel copies. Its length is fixed when it is made, so sizes stay exact.
class Computed {
 public:
  virtual ~Computed() = default;
  virtual uint64_t size() const = 0;
  // Writes bytes [offset, offset + n) of the result; reads what it needs through `files`.
  virtual void read(uint64_t offset, void* out, size_t n, const ExtentReader& files) const = 0;
  // Heap bytes held, for cache accounting.
  virtual size_t memory_bytes() const { return sizeof(*this); }
};

struct Segment {
  enum Kind : uint8_t { Inline, Stored, Zero, Computed };
  uint64_t start = 0;  // offset in the virtual file
  uint64_t length = 0;
  Kind kind = Inline;
  uint32_t file = 0;    // an id in the table the ExtentReader serves
  uint64_t offset = 0;  // Inline: into the blob; Stored: into the file; Computed: index in computed()
};

class VirtualFile {
 public:
  // A file that is `text` (a README, an index, a status page).
  static VirtualFile from_text(std::string_view text);

  void append_inline(std::string_view bytes);
  void append_extent(const Extent& e);
  void append_zero(uint64_t n);
  void append_computed(std::shared_ptr<const pt::Computed> c);
  // Bytes [at, at + n) of `from`, piece for piece: source ranges stay source ranges and a computed
  // piece cut in part is computed in part (a DCP chunk is rows of a tensor served whole elsewhere).
  void append(const VirtualFile& from, uint64_t at, uint64_t n);
  void append(const VirtualFile& from) { append(from, 0, from.size()); }
  void reserve(size_t segments) { segs_.reserve(segments); }  // avoids doubling a large file's table

  uint64_t size() const { return size_; }
  const std::vector<Segment>& segments() const { return segs_; }
  const std::vector<std::shared_ptr<const pt::Computed>>& computed() const { return computed_; }
  // Approximate heap bytes held, for cache accounting.
  size_t memory_bytes() const;

  // What bytes [offset, offset + n) are made of, for debug logs: "file 3 @4096 +1048576, zero +64".
  std::string describe(uint64_t offset, size_t n) const;

  // Copies up to n bytes at `offset`; returns the count (short only at end of file).
  size_t read(uint64_t offset, void* buf, size_t n, const ExtentReader& src) const;

 private:
  // The segment holding byte `offset` (< size()).
  std::vector<Segment>::const_iterator segment_at(uint64_t offset) const;
  std::vector<Segment> segs_;
  std::string blob_;
  std::vector<std::shared_ptr<const pt::Computed>> computed_;
  uint64_t size_ = 0;
};

}  // namespace zm::pt
