#pragma once
// The pickle machine's state, private to src/pt: pickle_reader.cpp runs the opcodes,
// pickle_torch.cpp interprets what torch's pickles call (tensor rebuilds, storages, the few
// containers), so that neither file mixes the byte-level machine with torch's conventions.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"

namespace zm::pt::pickle {

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

}  // namespace zm::pt::pickle
