// What torch's pickles call, interpreted without running anything: persistent ids of storages
// (each resolved to its zip record, its size checked), torch's tensor rebuild functions, and the
// containers torch and DeepSpeed write (OrderedDict, torch.Size, set, _codecs.encode).
#include <cstring>
#include <limits>

#include "pickle_machine.h"

namespace zm::pt::pickle {

Node* Machine::persistent_load(Node* pid) {
  if (pid->kind != Kind::Tuple || pid->items.size() != 5)
    fail("unsupported persistent id (expected ('storage', type, key, location, numel))");
  const Node* tag = pid->items[0];
  if ((tag->kind != Kind::Str && tag->kind != Kind::Bytes) || tag->s != "storage")
    fail("persistent id is not a storage");
  const Node* type = pid->items[1];
  const Node* key = pid->items[2];
  if (type->kind != Kind::Global) fail("storage type is not a class");
  auto dt = dtype_from_storage(type->s2);
  if (!dt) fail("unsupported storage type " + type->s + "." + type->s2);
  if (key->kind != Kind::Str) fail("storage key is not a string");
  const int64_t numel = as_int(pid->items[4], "storage numel");
  if (numel < 0 || uint64_t(numel) > (uint64_t(1) << 50)) fail("absurd storage numel " + std::to_string(numel));
  auto it = storages_.find(key->s);
  if (it != storages_.end()) {
    if (it->second->tensor->dtype != *dt) fail("storage '" + key->s + "' referenced with two dtypes");
    return it->second;
  }
  Node* n = make(Kind::Storage);
  Tensor t;
  t.dtype = *dt;
  t.storage = StorageRecord{key->s, uint64_t(numel), resolve_(key->s, uint64_t(numel) * element_size(*dt))};
  n->tensor = arena_.make_tensor(std::move(t));
  storages_.emplace(key->s, n);
  return n;
}

Node* Machine::rebuild_tensor(Node* args, bool v3) {
  if (args->kind != Kind::Tuple || args->items.size() < 4) fail("_rebuild_tensor: expected at least 4 arguments");
  const Node* storage = args->items[0];
  if (storage->kind != Kind::Storage) fail("_rebuild_tensor: first argument is not a storage");
  Tensor t = *storage->tensor;
  t.storage_offset = as_int(args->items[1], "tensor storage offset");
  const Node* size = args->items[2];
  const Node* stride = args->items[3];
  if (size->kind != Kind::Tuple || stride->kind != Kind::Tuple || size->items.size() != stride->items.size())
    fail("_rebuild_tensor: size and stride must be tuples of one length");
  if (size->items.size() > 64) fail("tensor has too many dimensions");
  if (args->items.size() >= 5 && args->items[4]->kind == Kind::Bool) t.requires_grad = args->items[4]->b;
  if (v3) {
    if (args->items.size() < 7 || args->items[6]->kind != Kind::Global) fail("_rebuild_tensor_v3: missing dtype");
    fail("_rebuild_tensor_v3 dtype " + args->items[6]->s2 + " is not supported");
  }
  if (t.storage_offset < 0) fail("negative tensor storage offset");
  // The last element touched must lie inside the storage; every product is checked for overflow.
  uint64_t last = uint64_t(t.storage_offset), numel = 1;
  for (size_t k = 0; k < size->items.size(); ++k) {
    const int64_t d = as_int(size->items[k], "tensor size"), s = as_int(stride->items[k], "tensor stride");
    if (d < 0 || s < 0) fail("negative tensor size or stride");
    t.shape.push_back(d);
    t.stride.push_back(s);
    if (d == 0)
      numel = 0;
    else if (__builtin_mul_overflow(numel, uint64_t(d), &numel))
      fail("tensor numel overflows");
    uint64_t span;
    if (d > 0 &&
        (__builtin_mul_overflow(uint64_t(d - 1), uint64_t(s), &span) || __builtin_add_overflow(last, span, &last)))
      fail("tensor extent overflows");
  }
  if (numel > 0 && last >= t.record().numel)
    fail("tensor (offset " + std::to_string(t.storage_offset) + ") runs past its storage '" + t.record().key + "' of " +
         std::to_string(t.record().numel) + " elements");
  Node* n = make(Kind::Tensor);
  n->tensor = arena_.make_tensor(std::move(t));
  return n;
}

Node* Machine::reduce(Node* callee, Node* args, int depth) {
  if (depth > 4) fail("nested tensor rebuild calls");
  if (args->kind != Kind::Tuple) fail("REDUCE arguments are not a tuple");
  const auto& a = args->items;
  if (callee->kind == Kind::Global) {
    const std::string& m = callee->s;
    const std::string& f = callee->s2;
    if (m == "torch._utils") {
      if (f == "_rebuild_tensor_v2" || f == "_rebuild_tensor") return rebuild_tensor(args, false);
      if (f == "_rebuild_tensor_v3") return rebuild_tensor(args, true);
      if (f == "_rebuild_parameter" || f == "_rebuild_parameter_with_state") {
        if (a.size() < 2 || a[0]->kind != Kind::Tensor) fail("_rebuild_parameter: expected a tensor");
        if (a[1]->kind == Kind::Bool) a[0]->tensor->requires_grad = a[1]->b;
        return const_cast<Node*>(a[0]);
      }
    }
    if (m == "torch._tensor" && f == "_rebuild_from_type_v2") {
      // (func, type, args, state): a tensor subclass or a tensor with Python attributes (ds_id).
      if (a.size() != 4 || a[0]->kind != Kind::Global) fail("_rebuild_from_type_v2: bad arguments");
      Node* t = reduce(const_cast<Node*>(a[0]), const_cast<Node*>(a[2]), depth + 1);
      if (t->kind == Kind::Tensor && a[3]->kind != Kind::None) t->tensor->attrs = a[3];
      return t;
    }
    if (m == "collections" && f == "OrderedDict") {
      Node* d = make(Kind::Dict);
      d->ordered = true;
      if (!a.empty()) {
        if (a[0]->kind != Kind::List) fail("OrderedDict argument is not a list of pairs");
        for (const Node* p : a[0]->items) {
          if (p->kind != Kind::Tuple || p->items.size() != 2) fail("OrderedDict item is not a pair");
          d->entries.emplace_back(p->items[0], p->items[1]);
        }
      }
      return d;
    }
    if (m == "torch" && f == "Size") {
      if (a.size() != 1 || a[0]->kind != Kind::Tuple) fail("torch.Size argument is not a tuple");
      return const_cast<Node*>(a[0]);
    }
    if (m == "_codecs" && f == "encode") {
      if (a.empty() || a[0]->kind != Kind::Str) fail("_codecs.encode argument is not a str");
      // latin-1: each code point below 256 becomes one byte. torch.load decodes the str as UTF-8.
      Node* b = make(Kind::Bytes);
      const std::string& s = a[0]->s;
      for (size_t k = 0; k < s.size(); ++k) {
        const auto c = uint8_t(s[k]);
        if (c < 0x80)
          b->s.push_back(char(c));
        else if ((c & 0xE0) == 0xC0 && k + 1 < s.size())
          b->s.push_back(char(((c & 0x1F) << 6) | (uint8_t(s[++k]) & 0x3F)));
        else
          fail("_codecs.encode: not latin-1");
      }
      return b;
    }
    if (m == "builtins" && (f == "set" || f == "frozenset")) {
      Node* s = make(Kind::Set);
      if (!a.empty()) {
        if (a[0]->kind != Kind::List && a[0]->kind != Kind::Tuple) fail("set argument is not a list");
        s->items = a[0]->items;
      }
      return s;
    }
    if (m == "builtins" && (f == "bytes" || f == "bytearray") && a.empty()) return make(Kind::Bytes);
  }
  Node* o = make(Kind::Object);
  o->how = Build::Reduce;
  o->callee = callee;
  o->args = args;
  return o;
}

}  // namespace zm::pt::pickle
