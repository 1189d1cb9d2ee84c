#include "zeromount/pt/pickle_reader.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <limits>

#include "pickle_machine.h"

namespace zm::pt {
namespace pickle {

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

}  // namespace pickle

const Node* decode_pickle(std::string_view bytes, Arena& arena, const std::string& file, const StorageResolver& resolve,
                          const PickleLimits& limits) {
  pickle::Machine m(bytes, arena, file, resolve, limits);
  return m.run();
}

}  // namespace zm::pt
