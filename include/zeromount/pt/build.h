#pragma once
// Building the pickle values that made-up .pt files hold: each function makes the one Python
// value its name says, in an Arena, as torch.save's pickler would meet it. Nothing here reads a
// file; pt::pickle_value and pt::build_pt write what is built.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "zeromount/pt/value.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::pt::build {

Node* dict(Arena& a);          // {}
Node* ordered_dict(Arena& a);  // collections.OrderedDict()
// d[key] = value for a key not in `d` yet: it goes last, as Python keeps insertion order.
void add(Node* d, Arena& a, std::string_view key, const Node* value);
// d[key] = value: an existing key keeps its place and takes the new value, a new one goes last.
void assign(Node* d, Arena& a, std::string_view key, const Node* value);
Node* none(Arena& a);
Node* boolean(Arena& a, bool v);
Node* real(Arena& a, double v);
Node* tuple(Arena& a, std::vector<const Node*> items);
Node* list(Arena& a, std::vector<const Node*> items);
Node* int_list(Arena& a, const std::vector<int64_t>& v);
Node* str_list(Arena& a, const std::vector<std::string>& v);
// torch.Size(dims): REDUCE of GLOBAL 'torch Size' on a tuple of ints.
Node* torch_size(Arena& a, const std::vector<int64_t>& dims);
// An object as protocol 2 pickles a dataclass: NEWOBJ of the class, then BUILD of its __dict__.
Node* new_object(Arena& a, std::string_view module, std::string_view cls, const Node* state);
// A tensor whose storage is `bytes` (file ranges, zero fill, computed pieces: virtual_file.h).
Node* tensor(Arena& a, DType dtype, std::vector<int64_t> shape, VirtualFile bytes);

// A tensor's bytes as they are assembled: source extents, zero fill and values in another dtype.
struct Fill {
  Tensor& t;
  void bytes(const Extent& e) { t.bytes().append_extent(e); }
  void zero(uint64_t n) { t.bytes().append_zero(n); }
  // `numel` elements stored as `source` in dtype `from`, in the tensor's dtype: another dtype is
  // computed when read (a 16-bit module weight made from its fp32 master [layouts §4.1]).
  void values(std::vector<Extent> source, DType from, uint64_t numel);
};

}  // namespace zm::pt::build
