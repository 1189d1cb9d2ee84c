#include "zeromount/pt/pickle_reader.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "zeromount/pt/error.h"

namespace zm::pt {
namespace {

// Opcodes, named as in CPython's pickletools.
enum Op : uint8_t {
  MARK = '(',
  STOP = '.',
  POP = '0',
  POP_MARK = '1',
  DUP = '2',
  FLOAT = 'F',
  INT = 'I',
  BININT = 'J',
  BININT1 = 'K',
  LONG = 'L',
  BININT2 = 'M',
  NONE = 'N',
  PERSID = 'P',
  BINPERSID = 'Q',
  REDUCE = 'R',
  STRING = 'S',
  BINSTRING = 'T',
  SHORT_BINSTRING = 'U',
  UNICODE = 'V',
  BINUNICODE = 'X',
  APPEND = 'a',
  BUILD = 'b',
  GLOBAL = 'c',
  DICT = 'd',
  EMPTY_DICT = '}',
  APPENDS = 'e',
  GET = 'g',
  BINGET = 'h',
  INST = 'i',
  LONG_BINGET = 'j',
  LIST = 'l',
  EMPTY_LIST = ']',
  OBJ = 'o',
  PUT = 'p',
  BINPUT = 'q',
  LONG_BINPUT = 'r',
  SETITEM = 's',
  TUPLE = 't',
  EMPTY_TUPLE = ')',
  SETITEMS = 'u',
  BINFLOAT = 'G',
  PROTO = 0x80,
  NEWOBJ = 0x81,
  EXT1 = 0x82,
  EXT2 = 0x83,
  EXT4 = 0x84,
  TUPLE1 = 0x85,
  TUPLE2 = 0x86,
  TUPLE3 = 0x87,
  NEWTRUE = 0x88,
  NEWFALSE = 0x89,
  LONG1 = 0x8a,
  LONG4 = 0x8b,
  BINBYTES = 'B',
  SHORT_BINBYTES = 'C',
  SHORT_BINUNICODE = 0x8c,
  BINUNICODE8 = 0x8d,
  BINBYTES8 = 0x8e,
  EMPTY_SET = 0x8f,
  ADDITEMS = 0x90,
  FROZENSET = 0x91,
  NEWOBJ_EX = 0x92,
  STACK_GLOBAL = 0x93,
  MEMOIZE = 0x94,
  FRAME = 0x95,
  BYTEARRAY8 = 0x96,
  NEXT_BUFFER = 0x97,
  READONLY_BUFFER = 0x98,
};

class Machine {
 public:
  Machine(std::string_view in, Arena& arena, const std::string& file, const StorageResolver& resolve,
          const PickleLimits& limits)
      : in_(in), arena_(arena), file_(file), resolve_(resolve), limits_(limits) {}

  const Node* run();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(where(file_, "pickle: " + what + " (at pickle byte " + std::to_string(op_pos_) + ")"));
  }
  const unsigned char* take(uint64_t n) {
    if (n > in_.size() - pos_) fail("truncated: needs " + std::to_string(n) + " more bytes");
    const auto* p = reinterpret_cast<const unsigned char*>(in_.data() + pos_);
    pos_ += n;
    return p;
  }
  uint64_t le(int n) {
    const unsigned char* p = take(n);
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = v << 8 | p[k];
    return v;
  }
  std::string_view line() {
    const size_t nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos) fail("truncated: text argument without newline");
    std::string_view s = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }
  std::string_view bytes(uint64_t n) {
    const auto* p = take(n);
    return {reinterpret_cast<const char*>(p), n};
  }

  Node* make(Kind k) {
    if (arena_.size() >= limits_.max_nodes) fail("too many values");
    return arena_.make(k);
  }
  void push(Node* n) {
    if (stack_.size() >= limits_.max_stack) fail("stack too deep");
    stack_.push_back(n);
  }
  Node* pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    Node* n = stack_.back();
    stack_.pop_back();
    return n;
  }
  Node* top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Node*> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Node*> items(stack_.begin() + long(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  Node* make_int_bytes(std::string_view le_bytes);
  Node* make_seq(Kind k, const std::vector<Node*>& items) {
    Node* n = make(k);
    n->items.assign(items.begin(), items.end());
    return n;
  }
  Node* make_str(std::string_view s, Kind k = Kind::Str) {
    Node* n = make(k);
    n->s.assign(s);
    return n;
  }
  Node* make_global(std::string_view module, std::string_view name);
  void memo_put(uint64_t idx, Node* n);
  Node* memo_get(uint64_t idx);

  Node* reduce(Node* callee, Node* args, int depth = 0);
  Node* rebuild_tensor(Node* args, bool v3);
  Node* persistent_load(Node* pid);
  void set_items(Node* target, const std::vector<Node*>& kv);
  void append_items(Node* target, const std::vector<Node*>& items);

  int64_t as_int(const Node* n, const char* what) {
    if (!n || n->kind != Kind::Int) fail(std::string(what) + ": expected int");
    return n->i;
  }

  std::string_view in_;
  size_t pos_ = 0, op_pos_ = 0;
  Arena& arena_;
  const std::string& file_;
  const StorageResolver& resolve_;
  const PickleLimits& limits_;
  std::vector<Node*> stack_;
  std::vector<size_t> marks_;
  std::vector<Node*> memo_;  // dense: torch writes indices 0, 1, 2, ...
  std::unordered_map<uint64_t, Node*> memo_sparse_;
  std::unordered_map<std::string, Node*> storages_;
};

Node* Machine::make_int_bytes(std::string_view b) {
  if (b.size() <= 8) {
    uint64_t v = 0;
    for (size_t k = b.size(); k-- > 0;) v = v << 8 | uint8_t(b[k]);
    if (!b.empty() && b.size() < 8 && (uint8_t(b.back()) & 0x80)) v |= ~uint64_t(0) << (8 * b.size());
    Node* n = make(Kind::Int);
    n->i = int64_t(v);
    return n;
  }
  return make_str(b, Kind::BigInt);
}

Node* Machine::make_global(std::string_view module, std::string_view name) {
  // Protocol 2 writes Python 2 names; Python 3 loaders map them, and so do we.
  if (module == "__builtin__") module = "builtins";
  if (module == "copy_reg") module = "copyreg";
  Node* n = make(Kind::Global);
  n->s.assign(module);
  n->s2.assign(name);
  return n;
}

void Machine::memo_put(uint64_t idx, Node* n) {
  if (idx < memo_.size()) {
    memo_[idx] = n;
    return;
  }
  if (idx == memo_.size() && memo_.size() < limits_.max_memo) {
    memo_.push_back(n);
    return;
  }
  if (memo_sparse_.size() >= limits_.max_memo) fail("memo too large");
  memo_sparse_[idx] = n;
}

Node* Machine::memo_get(uint64_t idx) {
  if (idx < memo_.size() && memo_[idx]) return memo_[idx];
  auto it = memo_sparse_.find(idx);
  if (it == memo_sparse_.end()) fail("memo key " + std::to_string(idx) + " not found");
  return it->second;
}

void Machine::set_items(Node* target, const std::vector<Node*>& kv) {
  if (kv.size() % 2) fail("SETITEMS with an odd number of values");
  if (target->kind != Kind::Dict && target->kind != Kind::Object)
    fail(std::string("SETITEM on a ") + std::string(target->kind_name()));
  for (size_t k = 0; k < kv.size(); k += 2) target->entries.emplace_back(kv[k], kv[k + 1]);
}

void Machine::append_items(Node* target, const std::vector<Node*>& items) {
  if (target->kind != Kind::List && target->kind != Kind::Object && target->kind != Kind::Set)
    fail(std::string("APPEND on a ") + std::string(target->kind_name()));
  target->items.insert(target->items.end(), items.begin(), items.end());
}

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
  t.storage_key = key->s;
  t.storage_numel = uint64_t(numel);
  t.record_offset = resolve_(key->s, uint64_t(numel) * element_size(*dt));
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
  if (numel > 0 && last >= t.storage_numel)
    fail("tensor (offset " + std::to_string(t.storage_offset) + ") runs past its storage '" + t.storage_key + "' of " +
         std::to_string(t.storage_numel) + " elements");
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
      d->b = true;
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

const Node* Machine::run() {
  while (true) {
    op_pos_ = pos_;
    const uint8_t op = *take(1);
    switch (op) {
      case PROTO:
        if (le(1) > 5) fail("unsupported pickle protocol");
        break;
      case FRAME:
        le(8);
        break;
      case STOP: {
        Node* root = pop();
        if (!stack_.empty() || !marks_.empty()) fail("values left on the stack at STOP");
        return root;
      }
      case MARK:
        if (marks_.size() >= limits_.max_stack) fail("too many MARKs");
        marks_.push_back(stack_.size());
        break;
      case POP:
        pop();
        break;
      case POP_MARK:
        pop_mark();
        break;
      case DUP:
        push(top());
        break;
      case NONE:
        push(make(Kind::None));
        break;
      case NEWTRUE:
      case NEWFALSE: {
        Node* n = make(Kind::Bool);
        n->b = op == NEWTRUE;
        push(n);
        break;
      }
      case BININT: {
        Node* n = make(Kind::Int);
        n->i = int32_t(uint32_t(le(4)));
        push(n);
        break;
      }
      case BININT1: {
        Node* n = make(Kind::Int);
        n->i = int64_t(le(1));
        push(n);
        break;
      }
      case BININT2: {
        Node* n = make(Kind::Int);
        n->i = int64_t(le(2));
        push(n);
        break;
      }
      case LONG1: {
        const uint64_t n = le(1);
        push(make_int_bytes(bytes(n)));
        break;
      }
      case LONG4: {
        const int64_t n = int32_t(uint32_t(le(4)));
        if (n < 0) fail("negative LONG4 length");
        push(make_int_bytes(bytes(uint64_t(n))));
        break;
      }
      case INT:
      case LONG: {
        std::string_view s = line();
        if (op == LONG && !s.empty() && s.back() == 'L') s.remove_suffix(1);
        Node* n = make(Kind::Int);
        if (op == INT && (s == "00" || s == "01")) {
          n->kind = Kind::Bool;
          n->b = s == "01";
          push(n);
          break;
        }
        auto r = std::from_chars(s.data(), s.data() + s.size(), n->i);
        if (r.ec != std::errc() || r.ptr != s.data() + s.size()) fail("bad text integer");
        push(n);
        break;
      }
      case FLOAT: {
        std::string s(line());
        char* end = nullptr;
        Node* n = make(Kind::Float);
        n->f = strtod(s.c_str(), &end);
        if (end != s.c_str() + s.size()) fail("bad text float");
        push(n);
        break;
      }
      case BINFLOAT: {
        const unsigned char* p = take(8);
        uint64_t v = 0;
        for (int k = 0; k < 8; ++k) v = v << 8 | p[k];  // big-endian
        Node* n = make(Kind::Float);
        n->f = std::bit_cast<double>(v);
        push(n);
        break;
      }
      case STRING: {
        std::string_view s = line();
        if (s.size() < 2 || (s.front() != '\'' && s.front() != '"') || s.back() != s.front())
          fail("bad STRING quoting");
        push(make_str(s.substr(1, s.size() - 2)));
        break;
      }
      case UNICODE:
        push(make_str(line()));
        break;
      case SHORT_BINSTRING:
      case SHORT_BINUNICODE: {
        const uint64_t n = le(1);
        push(make_str(bytes(n)));
        break;
      }
      case BINSTRING:
      case BINUNICODE: {
        const uint64_t n = le(4);
        push(make_str(bytes(n)));
        break;
      }
      case BINUNICODE8: {
        const uint64_t n = le(8);
        push(make_str(bytes(n)));
        break;
      }
      case SHORT_BINBYTES: {
        const uint64_t n = le(1);
        push(make_str(bytes(n), Kind::Bytes));
        break;
      }
      case BINBYTES: {
        const uint64_t n = le(4);
        push(make_str(bytes(n), Kind::Bytes));
        break;
      }
      case BINBYTES8:
      case BYTEARRAY8: {
        const uint64_t n = le(8);
        push(make_str(bytes(n), Kind::Bytes));
        break;
      }
      case EMPTY_LIST:
        push(make(Kind::List));
        break;
      case EMPTY_TUPLE:
        push(make(Kind::Tuple));
        break;
      case EMPTY_DICT:
        push(make(Kind::Dict));
        break;
      case EMPTY_SET:
        push(make(Kind::Set));
        break;
      case LIST:
        push(make_seq(Kind::List, pop_mark()));
        break;
      case TUPLE:
        push(make_seq(Kind::Tuple, pop_mark()));
        break;
      case FROZENSET:
        push(make_seq(Kind::Set, pop_mark()));
        break;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const size_t n = size_t(op - TUPLE1 + 1);
        if (stack_.size() < floor() + n) fail("stack underflow in TUPLE" + std::to_string(n));
        std::vector<Node*> items(stack_.end() - long(n), stack_.end());
        stack_.resize(stack_.size() - n);
        push(make_seq(Kind::Tuple, items));
        break;
      }
      case DICT: {
        Node* d = make(Kind::Dict);
        set_items(d, pop_mark());
        push(d);
        break;
      }
      case APPEND: {
        Node* v = pop();
        append_items(top(), {v});
        break;
      }
      case APPENDS: {
        auto items = pop_mark();
        append_items(top(), items);
        break;
      }
      case ADDITEMS: {
        auto items = pop_mark();
        Node* s = top();
        if (s->kind != Kind::Set) fail("ADDITEMS on a non-set");
        s->items.insert(s->items.end(), items.begin(), items.end());
        break;
      }
      case SETITEM: {
        Node* v = pop();
        Node* k = pop();
        set_items(top(), {k, v});
        break;
      }
      case SETITEMS: {
        auto kv = pop_mark();
        set_items(top(), kv);
        break;
      }
      case GLOBAL: {
        std::string_view m = line();
        std::string_view n = line();
        push(make_global(m, n));
        break;
      }
      case STACK_GLOBAL: {
        Node* n = pop();
        Node* m = pop();
        if (m->kind != Kind::Str || n->kind != Kind::Str) fail("STACK_GLOBAL needs two strings");
        push(make_global(m->s, n->s));
        break;
      }
      case REDUCE: {
        Node* args = pop();
        Node* callee = pop();
        push(reduce(callee, args));
        break;
      }
      case NEWOBJ:
      case NEWOBJ_EX: {
        if (op == NEWOBJ_EX) pop();  // kwargs: kept out of the tree, no loader we serve uses them
        Node* args = pop();
        Node* cls = pop();
        if (args->kind != Kind::Tuple) fail("NEWOBJ arguments are not a tuple");
        Node* o = make(Kind::Object);
        o->how = Build::NewObj;
        o->callee = cls;
        o->args = args;
        push(o);
        break;
      }
      case INST:
      case OBJ: {
        Node* cls;
        std::vector<Node*> items;
        if (op == INST) {
          std::string_view m = line();
          std::string_view n = line();
          cls = make_global(m, n);
          items = pop_mark();
        } else {
          items = pop_mark();
          if (items.empty()) fail("OBJ without a class");
          cls = items.front();
          items.erase(items.begin());
        }
        Node* o = make(Kind::Object);
        o->callee = cls;
        o->args = make_seq(Kind::Tuple, items);
        push(o);
        break;
      }
      case BUILD: {
        Node* state = pop();
        Node* obj = top();
        if (obj->kind == Kind::Tensor)
          obj->tensor->attrs = state;
        else if (obj->kind == Kind::Object || obj->kind == Kind::Dict)
          obj->state = state;
        else
          fail(std::string("BUILD on a ") + std::string(obj->kind_name()));
        break;
      }
      case BINPERSID: {
        Node* pid = pop();
        push(persistent_load(pid));
        break;
      }
      case PERSID:
        fail("text persistent ids are not supported");
      case PUT: {
        std::string_view s = line();
        uint64_t idx = 0;
        auto r = std::from_chars(s.data(), s.data() + s.size(), idx);
        if (r.ec != std::errc()) fail("bad PUT index");
        memo_put(idx, top());
        break;
      }
      case BINPUT:
        memo_put(le(1), top());
        break;
      case LONG_BINPUT:
        memo_put(le(4), top());
        break;
      case MEMOIZE:
        memo_put(memo_.size() + memo_sparse_.size(), top());
        break;
      case GET: {
        std::string_view s = line();
        uint64_t idx = 0;
        auto r = std::from_chars(s.data(), s.data() + s.size(), idx);
        if (r.ec != std::errc()) fail("bad GET index");
        push(memo_get(idx));
        break;
      }
      case BINGET:
        push(memo_get(le(1)));
        break;
      case LONG_BINGET:
        push(memo_get(le(4)));
        break;
      case EXT1:
      case EXT2:
      case EXT4:
        fail("extension-registry opcodes are not supported");
      case NEXT_BUFFER:
      case READONLY_BUFFER:
        fail("out-of-band buffers are not supported");
      default: {
        char hex[8];
        snprintf(hex, sizeof hex, "0x%02x", op);
        fail(std::string("unknown opcode ") + hex);
      }
    }
  }
}

}  // namespace

const Node* decode_pickle(std::string_view bytes, Arena& arena, const std::string& file, const StorageResolver& resolve,
                          const PickleLimits& limits) {
  Machine m(bytes, arena, file, resolve, limits);
  return m.run();
}

}  // namespace zm::pt
