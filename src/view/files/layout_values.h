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
#include "zeromount/pt/build.h"
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

// The pickle values of DeepSpeed's files: pt's builder vocabulary, and what only these files hold.
using pt::build::add;
using pt::build::boolean;
using pt::build::int_list;
using pt::build::new_object;
using pt::build::ordered_dict;
using pt::build::real;
using pt::build::torch_size;
using pt::build::tuple;

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
