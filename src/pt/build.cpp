#include "zeromount/pt/build.h"

#include <memory>

#include "zeromount/pt/convert.h"

namespace zm::pt::build {

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

Node* tensor(Arena& a, DType dtype, std::vector<int64_t> shape, VirtualFile bytes) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.made().bytes = std::make_shared<VirtualFile>(std::move(bytes));
  return a.make_tensor_node(std::move(t));
}

void Fill::values(std::vector<Extent> source, DType from, uint64_t numel) {
  if (!numel) return;
  if (from == t.dtype) {
    for (const auto& e : source) bytes(e);
    return;
  }
  t.bytes().append_computed(std::make_shared<ConvertedExtents>(std::move(source), from, t.dtype, numel, "layouts"));
}

}  // namespace zm::pt::build
