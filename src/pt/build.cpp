#include "zeromount/pt/build.h"

#include <algorithm>
#include <cstring>

#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"

namespace zm::pt::build {

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

// Bytes a file holds inline (a header), carried into a tensor's data.
class Constant final : public Computed {
 public:
  explicit Constant(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(uint64_t offset, void* out, size_t n, const ExtentReader&) const override {
    memcpy(out, bytes_.data() + offset, n);
  }
  size_t memory_bytes() const override { return sizeof(*this) + bytes_.capacity(); }

 private:
  std::string bytes_;
};

// Inline bytes need no source: a reader that is never asked.
struct NoFiles final : ExtentReader {
  void pread(uint32_t, uint64_t, void*, size_t) const override { throw Error("inline bytes read a file", EIO); }
};

std::string inline_bytes(const VirtualFile& f, uint64_t at, uint64_t n) {
  std::string bytes(n, '\0');
  f.read(at, bytes.data(), n, NoFiles{});
  return bytes;
}

}  // namespace

void slice_data(const VirtualFile& file, uint64_t from, uint64_t length, Tensor& out) {
  const uint64_t end = from + length;
  if (end > file.size()) throw Error("a slice past the end of its tensor", EIO);
  for (const Segment& s : file.segments()) {
    const uint64_t lo = std::max(from, s.start), hi = std::min(end, s.start + s.length);
    if (lo >= hi) continue;
    const uint64_t within = lo - s.start, n = hi - lo;
    switch (s.kind) {
      case Segment::Stored:
        out.data.push_back({s.file, s.offset + within, n});
        break;
      case Segment::Zero:
        out.data.push_back({kZeroFill, 0, n});
        break;
      case Segment::Computed:
        out.append_computed(std::make_shared<SliceOf>(file.computed()[s.offset], within, n));
        break;
      case Segment::Inline:
        out.append_computed(std::make_shared<Constant>(inline_bytes(file, lo, n)));
        break;
    }
  }
}

Node* dict(Arena& a) {
  return a.make(Kind::Dict);
}

Node* ordered_dict(Arena& a) {
  Node* d = a.make(Kind::Dict);
  d->ordered = true;
  return d;
}

void add(Node* d, Arena& a, std::string_view key, const Node* value) {
  d->entries.emplace_back(a.make_str(std::string(key)), value);
}

void assign(Node* d, Arena& a, std::string_view key, const Node* value) {
  for (auto& [k, v] : d->entries)
    if (k->kind == Kind::Str && k->s == key) {
      v = value;
      return;
    }
  add(d, a, key, value);
}

Node* none(Arena& a) {
  return a.make(Kind::None);
}

Node* boolean(Arena& a, bool v) {
  Node* n = a.make(Kind::Bool);
  n->b = v;
  return n;
}

Node* real(Arena& a, double v) {
  Node* n = a.make(Kind::Float);
  n->f = v;
  return n;
}

Node* tuple(Arena& a, std::vector<const Node*> items) {
  Node* n = a.make(Kind::Tuple);
  n->items = std::move(items);
  return n;
}

Node* list(Arena& a, std::vector<const Node*> items) {
  Node* n = a.make(Kind::List);
  n->items = std::move(items);
  return n;
}

Node* int_list(Arena& a, const std::vector<int64_t>& v) {
  Node* n = a.make(Kind::List);
  for (int64_t x : v) n->items.push_back(a.make_int(x));
  return n;
}

Node* str_list(Arena& a, const std::vector<std::string>& v) {
  Node* n = a.make(Kind::List);
  for (const auto& x : v) n->items.push_back(a.make_str(x));
  return n;
}

Node* torch_size(Arena& a, const std::vector<int64_t>& dims) {
  std::vector<const Node*> d;
  for (int64_t x : dims) d.push_back(a.make_int(x));
  Node* n = a.make(Kind::Object);
  n->callee = a.make_global("torch", "Size");
  n->args = tuple(a, {tuple(a, std::move(d))});
  return n;
}

Node* new_object(Arena& a, std::string_view module, std::string_view cls, const Node* state) {
  Node* n = a.make(Kind::Object);
  n->how = Build::NewObj;
  n->callee = a.make_global(std::string(module), std::string(cls));
  n->args = tuple(a, {});
  n->state = state;
  return n;
}

Node* tensor(Arena& a, DType dtype, std::vector<int64_t> shape, std::vector<Extent> data) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return a.make_tensor_node(std::move(t));
}

void Fill::values(std::vector<Extent> source, DType from, uint64_t numel) {
  if (!numel) return;
  if (from == t.dtype) {
    for (const auto& e : source) bytes(e);
    return;
  }
  t.append_computed(std::make_shared<ConvertedExtents>(std::move(source), from, t.dtype, numel, "layouts"));
}

}  // namespace zm::pt::build
