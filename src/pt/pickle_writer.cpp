#include "zeromount/pt/pickle_writer.h"

#include <bit>
#include <deque>
#include <unordered_map>

#include "zeromount/pt/error.h"

namespace zm::pt {
namespace {

class Emitter {
 public:
  PickledTensors run(const Node* root) {
    out_.pickle = "\x80\x02";
    save(root, 0);
    out_.pickle += '.';
    return std::move(out_);
  }

 private:
  std::string& w() { return out_.pickle; }
  void u8(uint8_t v) { w().push_back(char(v)); }
  void le(uint64_t v, int n) {
    for (int k = 0; k < n; ++k) u8(uint8_t(v >> (8 * k)));
  }

  // CPython's memo: BINPUT after each memoizable object, BINGET when it recurs.
  void memoize(const void* key) {
    const uint32_t idx = uint32_t(memo_.size());
    memo_.emplace(key, idx);
    put(idx);
  }
  void put(uint32_t idx) {
    if (idx < 256) {
      u8('q');
      u8(uint8_t(idx));
    } else {
      u8('r');
      le(idx, 4);
    }
  }
  bool get(const void* key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return false;
    if (it->second < 256) {
      u8('h');
      u8(uint8_t(it->second));
    } else {
      u8('j');
      le(it->second, 4);
    }
    return true;
  }

  // A memo key for an object that exists only during this emission (a fresh tuple in Python).
  const void* unique_key() { return &unique_.emplace_back(); }

  void save_int(int64_t v) {
    if (v >= 0 && v < 256) {
      u8('K');
      u8(uint8_t(v));
    } else if (v >= 0 && v < 65536) {
      u8('M');
      le(uint64_t(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      u8('J');
      le(uint64_t(v), 4);
    } else {
      // LONG1: minimal little-endian two's complement, as pickle's encode_long.
      std::string b;
      uint64_t u = uint64_t(v);
      for (int k = 0; k < 8; ++k) b.push_back(char(u >> (8 * k)));
      while (b.size() > 1 && ((b.back() == 0 && !(uint8_t(b[b.size() - 2]) & 0x80)) ||
                              (uint8_t(b.back()) == 0xFF && (uint8_t(b[b.size() - 2]) & 0x80))))
        b.pop_back();
      u8(0x8a);
      u8(uint8_t(b.size()));
      w() += b;
    }
  }
  void save_str_raw(const std::string& s) {
    u8('X');
    le(s.size(), 4);
    w() += s;
  }
  void save_str(const void* key, const std::string& s) {
    if (get(key)) return;
    save_str_raw(s);
    memoize(key);
  }
  void save_global(const std::string& module, const std::string& name) {
    // Globals are class objects in Python: one memo entry each, keyed by name.
    auto [it, fresh] = globals_.try_emplace(module + '\n' + name, nullptr);
    if (fresh) it->second = &it->first;
    if (get(it->second)) return;
    u8('c');
    w() += (module == "builtins" ? std::string("__builtin__") : module) + '\n' + name + '\n';
    memoize(it->second);
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
    const Tensor* owner = t->storage_of ? t->storage_of : t;  // a view writes its base's storage
    if (owner->data.empty() && owner->write_bytes() > 0) throw Error("pickle writer: tensor has no data extents");
    if (t->storage_of && uint64_t(t->storage_offset) + t->numel() > owner->write_numel())
      throw Error("pickle writer: a view reaches past its storage");
    save_global("torch._utils", "_rebuild_tensor_v2");
    u8('(');
    // Persistent id ('storage', torch.XStorage, key, 'cpu', numel): a fresh tuple each time,
    // with the 'storage' and 'cpu' constants and the key string shared, as torch's pickler has them.
    u8('(');
    save_str(&kStorage, "storage");
    save_global("torch", std::string(storage_class(t->dtype)));
    auto [it, fresh] = keys_.try_emplace(owner, std::to_string(out_.storages.size()));
    if (fresh) out_.storages.push_back(owner);
    save_str(&it->second, it->second);
    save_str(&kCpu, "cpu");
    save_int(int64_t(owner->write_numel()));
    u8('t');
    memoize(unique_key());  // the pid tuple is new each time, so its memo entry is never hit
    u8('Q');
    save_int(t->storage_of ? t->storage_offset : 0);
    std::vector<int64_t> stride(t->shape.size());
    int64_t s = 1;
    for (size_t k = t->shape.size(); k-- > 0;) {
      stride[k] = s;
      s *= t->shape[k];
    }
    save_shape(t->shape, depth);
    save_shape(stride, depth);
    u8(t->requires_grad ? 0x88 : 0x89);
    save_global("collections", "OrderedDict");
    empty_tuple();
    u8('R');
    memoize(unique_key());
    u8('t');
    memoize(unique_key());
    u8('R');
    memoize(t);
  }
  void save_shape(const std::vector<int64_t>& dims, int depth) {
    if (dims.empty()) return empty_tuple();
    if (dims.size() > 3) u8('(');
    for (int64_t d : dims) save_int(d);
    if (dims.size() <= 3)
      u8(uint8_t(0x85 + dims.size() - 1));
    else
      u8('t');
    memoize(unique_key());
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
          memoize(unique_key());
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
        if (n->b) {
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
        memoize(unique_key());
        save_items(n, depth);
        u8(0x85);
        memoize(unique_key());
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
  PickledTensors out_;
  std::unordered_map<const void*, uint32_t> memo_;
  std::unordered_map<std::string, const std::string*> globals_;
  std::unordered_map<const Tensor*, std::string> keys_;
  std::deque<char> unique_;
  std::deque<std::string> strs_;
};

}  // namespace

PickledTensors pickle_value(const Node* root) {
  return Emitter().run(root);
}

}  // namespace zm::pt
