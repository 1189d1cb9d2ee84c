#pragma once
// The pieces the faked layout files are made of (private to layout_files.cpp and
// layout_optim.cpp): tensors assembled from source extents, zero fill and computed bytes, and the
// pickle values DeepSpeed's files hold.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/value.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view::layout {

using pt::Kind;
using pt::Node;

// --- tensors from pieces -------------------------------------------------------------------

// A tensor's data as it is assembled: source extents, zero fill and computed pieces (value.h).
struct Fill {
  pt::Tensor& t;
  void bytes(const pt::Extent& e) {
    if (e.length) t.data.push_back(e);
  }
  void zero(uint64_t n) {
    if (n) t.data.push_back({pt::kZeroFill, 0, n});
  }
  // `numel` elements stored as `source` in dtype `from`, in the tensor's dtype.
  void values(std::vector<pt::Extent> source, pt::DType from, uint64_t numel) {
    if (!numel) return;
    if (from == t.dtype) {
      for (const auto& e : source) bytes(e);
      return;
    }
    // A 16-bit module weight made from its fp32 master only when it is read (spec §4.1).
    auto c = std::make_shared<pt::ConvertedExtents>(std::move(source), from, t.dtype, numel, "layouts");
    t.append_computed(std::move(c));
  }
};

// File-table extents of elements [from, from + count) of a flat state made of `frags`.
inline std::vector<pt::Extent> elements(const MountedTag& t, const std::vector<ds::Fragment>& frags, uint64_t from,
                                        uint64_t count, uint64_t es) {
  std::vector<pt::Extent> out;
  uint64_t have = 0;
  for (const ds::Fragment& f : frags) {
    const uint64_t lo = std::max(from, f.start), hi = std::min(from + count, f.start + f.numel);
    if (lo >= hi) continue;
    out.push_back(t.map({f.extent.file, f.extent.offset + (lo - f.start) * es, (hi - lo) * es}));
    have += hi - lo;
  }
  if (have != count) throw Error("layouts: the index does not cover a parameter's elements", EIO);
  return out;
}

// Bytes [from, from + n) of a plain tensor's concatenated extents, in file-table ids.
inline std::vector<pt::Extent> plain_bytes(const MountedTag& t, const ds::PlainTensor& p, uint64_t from, uint64_t n) {
  std::vector<pt::Extent> out;
  uint64_t at = 0;
  for (const pt::Extent& e : p.data) {
    const uint64_t lo = std::max(from, at), hi = std::min(from + n, at + e.length);
    if (lo < hi) out.push_back(t.map({e.file, e.offset + (lo - at), hi - lo}));
    at += e.length;
  }
  return out;
}

// --- pickle values --------------------------------------------------------------------------

inline void set(Node* dict, pt::Arena& a, const char* key, const Node* value) {
  dict->entries.emplace_back(a.make_str(key), value);
}
inline Node* ordered_dict(pt::Arena& a) {
  Node* d = a.make(Kind::Dict);
  d->b = true;
  return d;
}
inline Node* boolean(pt::Arena& a, bool v) {
  Node* n = a.make(Kind::Bool);
  n->b = v;
  return n;
}
inline Node* real(pt::Arena& a, double v) {
  Node* n = a.make(Kind::Float);
  n->f = v;
  return n;
}
inline Node* tuple(pt::Arena& a, std::vector<const Node*> items) {
  Node* n = a.make(Kind::Tuple);
  n->items = std::move(items);
  return n;
}
inline Node* int_list(pt::Arena& a, const std::vector<int64_t>& v) {
  Node* n = a.make(Kind::List);
  for (int64_t x : v) n->items.push_back(a.make_int(x));
  return n;
}
// torch.Size(dims): REDUCE of GLOBAL 'torch Size' on a tuple of ints.
inline Node* torch_size(pt::Arena& a, const std::vector<int64_t>& dims) {
  std::vector<const Node*> d;
  for (int64_t x : dims) d.push_back(a.make_int(x));
  Node* n = a.make(Kind::Object);
  n->callee = a.make_global("torch", "Size");
  n->args = tuple(a, {tuple(a, std::move(d))});
  return n;
}
// A dataclass or plain object as protocol 2 pickles it: NEWOBJ of the class, BUILD of its __dict__.
inline Node* new_object(pt::Arena& a, const char* module, const char* cls, const Node* state) {
  Node* n = a.make(Kind::Object);
  n->how = pt::Build::NewObj;
  n->callee = a.make_global(module, cls);
  n->args = tuple(a, {});
  n->state = state;
  return n;
}
inline Node* zero_stage(pt::Arena& a, int stage) {
  Node* n = a.make(Kind::Object);
  n->callee = a.make_global("deepspeed.runtime.zero.config", "ZeroStageEnum");
  n->args = tuple(a, {a.make_int(stage)});
  return n;
}

inline Node* tensor(pt::Arena& a, pt::Tensor t) {
  return a.make_tensor_node(std::move(t));
}

inline pt::DType lp_dtype(ds::Precision p) {
  return p == ds::Precision::Fp32 ? pt::DType::F32 : p == ds::Precision::Bf16 ? pt::DType::BF16 : pt::DType::F16;
}

inline std::string stem(const std::string& name) {
  return std::filesystem::path(name).stem().string();
}

}  // namespace zm::view::layout
