#include "zeromount/pt/pickle_writer.h"

#include <array>
#include <bit>
#include <deque>
#include <string_view>
#include <vector>

#include "pickle_ops.h"
#include "zeromount/pt/error.h"

namespace zm::pt {
namespace {

// Pointer -> memo index, open addressing with linear probing. The memo is looked up once per
// value written and filled once per memoizable one; a node-based map spent more time in malloc
// and free than the emitter spent writing (bench/README.md).
class PtrIndex {
 public:
  const uint32_t* find(const void* key) const {
    if (used_ == 0) return nullptr;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (!slots_[i].key) return nullptr;
    }
  }
  void insert(const void* key, uint32_t value) {  // key is not null and not present
    if ((used_ + 1) * 2 > slots_.size()) grow();
    size_t i = slot(key);
    while (slots_[i].key) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++used_;
  }

 private:
  struct Slot {
    const void* key = nullptr;
    uint32_t value = 0;
  };
  size_t slot(const void* key) const {
    return size_t((uint64_t(reinterpret_cast<uintptr_t>(key)) * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 4096 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    used_ = 0;
    for (const Slot& o : old)
      if (o.key) insert(o.key, o.value);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, used_ = 0;
};

class Emitter {
 public:
  PickledTensors run(const Node* root) {
    out_.pickle.reserve(1 << 16);
    out_.pickle = "\x80\x02";
    save(root, 0);
    out_.pickle += '.';
    return std::move(out_);
  }

 private:
  std::string& w() { return out_.pickle; }
  void u8(uint8_t v) { w().push_back(char(v)); }

  // CPython's memo: BINPUT after each memoizable object, BINGET when it recurs.
  void memoize(const void* key) {
    const uint32_t idx = next_memo_++;
    memo_.insert(key, idx);
    ops::put(w(), idx);
  }
  // The memo entry of an object that exists only during this emission (a fresh tuple in Python):
  // it takes an index, as CPython's BINPUT does, but can never be found again.
  void memoize_fresh() { ops::put(w(), next_memo_++); }
  bool get(const void* key) {
    const uint32_t* idx = memo_.find(key);
    if (!idx) return false;
    ops::get(w(), *idx);
    return true;
  }
  void save_int(int64_t v) { ops::integer(w(), v); }
  void save_str(const void* key, const std::string& s) {
    if (get(key)) return;
    ops::str(w(), s);
    memoize(key);
  }
  void save_global(std::string_view module, std::string_view name) {
    // Globals are class objects in Python: one memo entry each, keyed by name. A file has a
    // handful of distinct globals, so a linear search beats hashing a concatenated key.
    for (const Global& g : globals_)
      if (g.module == module && g.name == name) return ops::get(w(), g.memo);
    ops::global(w(), module == "builtins" ? std::string_view("__builtin__") : module, name);
    const uint32_t idx = next_memo_++;
    ops::put(w(), idx);
    globals_.push_back({std::string(module), std::string(name), idx});
  }
  void empty_tuple() { u8(')'); }
  template <typename F>
  void batched(size_t n, const char* one, const char* many, F&& item) {
    for (size_t at = 0; at < n; at += 1000) {
      const size_t end = std::min(n, at + 1000);
      if (end - at > 1) u8('(');
      for (size_t k = at; k < end; ++k) item(k);
      w() += (end - at > 1) ? many : one;
    }
  }
  void save_items(const Node* n, int depth) {
    batched(n->items.size(), "a", "e", [&](size_t k) { save(n->items[k], depth + 1); });
  }
  void save_entries(const Node* n, int depth) {
    batched(n->entries.size(), "s", "u", [&](size_t k) {
      save(n->entries[k].first, depth + 1);
      save(n->entries[k].second, depth + 1);
    });
  }
  void save_tuple(const std::vector<const Node*>& items, const void* key, int depth) {
    if (items.empty()) return empty_tuple();
    if (items.size() > 3) u8('(');
    for (const Node* it : items) save(it, depth + 1);
    if (items.size() <= 3)
      u8(uint8_t(0x85 + items.size() - 1));
    else
      u8('t');
    memoize(key);
  }
  void save_tensor(const Tensor* t, int depth) {
    if (get(t)) return;
    const MadeStorage* made = std::get_if<MadeStorage>(&t->storage);
    if (!made) throw Error("pickle writer: a decoded tensor has no bytes of its own to write");
    const Tensor* owner = made->storage_of ? made->storage_of : t;  // a view writes its base's storage
    if (!owner->made().bytes && owner->write_bytes() > 0) throw Error("pickle writer: tensor has no data");
    if (made->storage_of && uint64_t(t->storage_offset) + t->numel() > owner->write_numel())
      throw Error("pickle writer: a view reaches past its storage");
    save_global("torch._utils", "_rebuild_tensor_v2");
    u8('(');
    // Persistent id ('storage', torch.XStorage, key, 'cpu', numel): a fresh tuple each time,
    // with the 'storage' and 'cpu' constants and the key string shared, as torch's pickler has them.
    u8('(');
    save_str(&kStorage, "storage");
    save_global("torch", storage_class(t->dtype));
    const std::string* key;
    if (const uint32_t* k = storage_ids_.find(owner)) {
      key = &keys_[*k];
    } else {
      storage_ids_.insert(owner, uint32_t(out_.storages.size()));
      key = &keys_.emplace_back(std::to_string(out_.storages.size()));
      out_.storages.push_back(owner);
    }
    save_str(key, *key);
    save_str(&kCpu, "cpu");
    save_int(int64_t(owner->write_numel()));
    u8('t');
    memoize_fresh();  // the pid tuple is new each time, so its memo entry is never hit
    u8('Q');
    save_int(made->storage_of ? t->storage_offset : 0);
    const size_t nd = t->shape.size();
    std::array<int64_t, 8> small{};
    std::vector<int64_t> big(nd > small.size() ? nd : 0);
    int64_t* stride = nd > small.size() ? big.data() : small.data();
    int64_t s = 1;
    for (size_t k = nd; k-- > 0;) {
      stride[k] = s;
      s *= t->shape[k];
    }
    save_shape(t->shape.data(), nd);
    save_shape(stride, nd);
    u8(t->requires_grad ? 0x88 : 0x89);
    save_global("collections", "OrderedDict");
    empty_tuple();
    u8('R');
    memoize_fresh();
    u8('t');
    memoize_fresh();
    u8('R');
    memoize(t);
  }
  void save_shape(const int64_t* dims, size_t n) {
    if (n == 0) return empty_tuple();
    if (n > 3) u8('(');
    for (size_t k = 0; k < n; ++k) save_int(dims[k]);
    if (n <= 3)
      u8(uint8_t(0x85 + n - 1));
    else
      u8('t');
    memoize_fresh();
  }

  void save(const Node* n, int depth) {
    if (!n) throw Error("pickle writer: null value");
    if (depth > 200) throw Error("pickle writer: value nested too deeply");
    switch (n->kind) {
      case Kind::None:
        u8('N');
        return;
      case Kind::Bool:
        u8(n->b ? 0x88 : 0x89);
        return;
      case Kind::Int:
        save_int(n->i);
        return;
      case Kind::BigInt:
        u8(0x8a);
        u8(uint8_t(n->s.size()));
        w() += n->s;
        return;
      case Kind::Float: {
        u8('G');
        const auto v = std::bit_cast<uint64_t>(n->f);
        for (int k = 7; k >= 0; --k) u8(uint8_t(v >> (8 * k)));
        return;
      }
      case Kind::Str:
        return save_str(n, n->s);
      case Kind::Bytes: {
        if (get(n)) return;
        if (n->s.empty()) {
          save_global("builtins", "bytes");
          empty_tuple();
        } else {
          save_global("_codecs", "encode");
          std::string latin1;  // bytes travel as their latin-1 decoding, UTF-8 encoded
          for (unsigned char c : n->s) {
            if (c < 0x80)
              latin1.push_back(char(c));
            else {
              latin1.push_back(char(0xC0 | (c >> 6)));
              latin1.push_back(char(0x80 | (c & 0x3F)));
            }
          }
          save_str(&strs_.emplace_back(latin1), latin1);
          save_str(&kLatin1, "latin1");
          u8(0x86);
          memoize_fresh();
        }
        u8('R');
        memoize(n);
        return;
      }
      case Kind::List:
        if (get(n)) return;
        u8(']');
        memoize(n);
        return save_items(n, depth);
      case Kind::Tuple:
        if (get(n)) return;
        return save_tuple(n->items, n, depth);
      case Kind::Dict:
        if (get(n)) return;
        if (n->ordered) {
          save_global("collections", "OrderedDict");
          empty_tuple();
          u8('R');
        } else {
          u8('}');
        }
        memoize(n);
        save_entries(n, depth);
        if (n->state) {
          save(n->state, depth + 1);
          u8('b');
        }
        return;
      case Kind::Set: {
        if (get(n)) return;
        save_global("builtins", "set");
        u8(']');
        memoize_fresh();
        save_items(n, depth);
        u8(0x85);
        memoize_fresh();
        u8('R');
        memoize(n);
        return;
      }
      case Kind::Global:
        return save_global(n->s, n->s2);
      case Kind::Object:
        if (get(n)) return;
        save(n->callee, depth + 1);
        save(n->args ? n->args : &kEmptyTuple, depth + 1);
        u8(n->how == Build::NewObj ? 0x81 : 'R');
        memoize(n);
        if (!n->items.empty()) save_items(n, depth);
        if (!n->entries.empty()) save_entries(n, depth);
        if (n->state) {
          save(n->state, depth + 1);
          u8('b');
        }
        return;
      case Kind::Tensor:
        return save_tensor(n->tensor, depth);
      case Kind::Storage:
        throw Error("pickle writer: bare storages are not supported");
    }
  }

  static inline const char kStorage = 0, kCpu = 0, kLatin1 = 0;
  static inline const Node kEmptyTuple = [] {
    Node n;
    n.kind = Kind::Tuple;
    return n;
  }();
  struct Global {
    std::string module, name;
    uint32_t memo;
  };
  PickledTensors out_;
  PtrIndex memo_;
  uint32_t next_memo_ = 0;
  std::vector<Global> globals_;
  PtrIndex storage_ids_;          // storage owner -> index in keys_ / out_.storages
  std::deque<std::string> keys_;  // "0", "1", ...: stable addresses, they are memo keys
  std::deque<std::string> strs_;
};

}  // namespace

PickledTensors pickle_value(const Node* root) {
  return Emitter().run(root);
}

}  // namespace zm::pt
