#include "zeromount/pt/virtual_file.h"

#include <algorithm>
#include <cstring>

#include "zeromount/pt/error.h"

namespace zm::pt {

namespace {

// Bytes [at, at + n) of a computed piece.
class SliceOf final : public Computed {
 public:
  SliceOf(std::shared_ptr<const Computed> base, uint64_t at, uint64_t n) : base_(std::move(base)), at_(at), n_(n) {}
  uint64_t size() const override { return n_; }
  void read(uint64_t offset, void* out, size_t n, const ExtentReader& files) const override {
    base_->read(at_ + offset, out, n, files);
  }
  size_t memory_bytes() const override { return sizeof(*this); }

 private:
  std::shared_ptr<const Computed> base_;
  uint64_t at_, n_;
};

}  // namespace

VirtualFile VirtualFile::from_text(std::string_view text) {
  VirtualFile f;
  f.append_inline(text);
  return f;
}

void VirtualFile::append_inline(std::string_view bytes) {
  if (bytes.empty()) return;
  if (!segs_.empty() && segs_.back().kind == Segment::Inline) {
    segs_.back().length += bytes.size();
  } else {
    segs_.push_back({size_, bytes.size(), Segment::Inline, 0, blob_.size()});
  }
  blob_.append(bytes);
  size_ += bytes.size();
}

void VirtualFile::append_extent(const Extent& e) {
  if (e.length == 0) return;
  if (!segs_.empty()) {
    Segment& b = segs_.back();
    if (b.kind == Segment::Stored && b.file == e.file && b.offset + b.length == e.offset) {
      b.length += e.length;
      size_ += e.length;
      return;
    }
  }
  segs_.push_back({size_, e.length, Segment::Stored, e.file, e.offset});
  size_ += e.length;
}

void VirtualFile::append_zero(uint64_t n) {
  if (n == 0) return;
  if (!segs_.empty() && segs_.back().kind == Segment::Zero) {
    segs_.back().length += n;
  } else {
    segs_.push_back({size_, n, Segment::Zero, 0, 0});
  }
  size_ += n;
}

void VirtualFile::append_computed(std::shared_ptr<const pt::Computed> c) {
  const uint64_t n = c->size();
  if (n == 0) return;
  segs_.push_back({size_, n, Segment::Computed, 0, computed_.size()});
  computed_.push_back(std::move(c));
  size_ += n;
}

std::vector<Segment>::const_iterator VirtualFile::segment_at(uint64_t offset) const {
  auto it =
      std::upper_bound(segs_.begin(), segs_.end(), offset, [](uint64_t o, const Segment& s) { return o < s.start; });
  return --it;  // segments tile [0, size_) and offset < size_
}

void VirtualFile::append(const VirtualFile& from, uint64_t at, uint64_t n) {
  const uint64_t end = at + n;
  if (end < at || end > from.size()) throw Error("a slice past the end of its file", EIO);
  if (n == 0) return;
  // From the segment holding `at`: a DCP chunk is a few rows of a tensor of many pieces.
  for (auto it = from.segment_at(at); it != from.segs_.end() && it->start < end; ++it) {
    const Segment& s = *it;
    const uint64_t lo = std::max(at, s.start), hi = std::min(end, s.start + s.length);
    if (lo >= hi) continue;
    const uint64_t within = lo - s.start, take = hi - lo;
    switch (s.kind) {
      case Segment::Inline:
        append_inline(std::string_view(from.blob_).substr(s.offset + within, take));
        break;
      case Segment::Stored:
        append_extent({s.file, s.offset + within, take});
        break;
      case Segment::Zero:
        append_zero(take);
        break;
      case Segment::Computed: {
        const auto& c = from.computed_[s.offset];
        append_computed(take == s.length ? c : std::make_shared<SliceOf>(c, within, take));
        break;
      }
    }
  }
}

size_t VirtualFile::memory_bytes() const {
  size_t n = blob_.capacity() + segs_.capacity() * sizeof(Segment) + sizeof(*this);
  for (const auto& c : computed_) n += c->memory_bytes();
  return n;
}

size_t VirtualFile::read(uint64_t offset, void* buf, size_t n, const ExtentReader& src) const {
  if (offset >= size_) return 0;
  n = size_t(std::min<uint64_t>(n, size_ - offset));
  auto it = segment_at(offset);
  auto* out = static_cast<char*>(buf);
  size_t done = 0;
  for (; done < n && it != segs_.end(); ++it) {
    const uint64_t within = offset + done - it->start;
    const size_t take = size_t(std::min<uint64_t>(n - done, it->length - within));
    switch (it->kind) {
      case Segment::Inline:
        memcpy(out + done, blob_.data() + it->offset + within, take);
        break;
      case Segment::Zero:
        memset(out + done, 0, take);
        break;
      case Segment::Stored:
        src.pread(it->file, it->offset + within, out + done, take);
        break;
      case Segment::Computed:
        computed_[it->offset]->read(within, out + done, take, src);
        break;
    }
    done += take;
  }
  return done;
}

std::string VirtualFile::describe(uint64_t off, size_t n) const {
  std::string out;
  for (const auto& s : segs_) {
    if (s.start + s.length <= off || s.start >= off + n) continue;
    const uint64_t a = std::max(off, s.start), b = std::min(off + n, s.start + s.length);
    if (!out.empty()) out += ", ";
    switch (s.kind) {
      case Segment::Stored:
        out += "file " + std::to_string(s.file) + " @" + std::to_string(s.offset + (a - s.start));
        break;
      case Segment::Zero:
        out += "zero";
        break;
      case Segment::Inline:
        out += "inline";
        break;
      case Segment::Computed:
        out += "computed";
        break;
    }
    out += " +" + std::to_string(b - a);
  }
  return out.empty() ? "nothing" : out;
}

}  // namespace zm::pt
