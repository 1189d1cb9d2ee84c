#pragma once
// The immutable value tree a pickle decodes to. Nodes live in an Arena and point at each other
// with raw pointers: teardown is flat (no recursion, so hostile nesting cannot overflow the stack)
// and cycles built through the memo are harmless.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "zeromount/pt/dtype.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::pt {

struct Node;
struct Tensor;

// Reader: the record of a .pt file that holds a decoded tensor's storage.
struct StorageRecord {
  std::string key;      // names the record data/<key>
  uint64_t numel = 0;   // from the persistent id; record size = numel * element_size
  uint64_t offset = 0;  // file offset of the record's first byte
};

// Writer: the storage a made-up tensor is saved with: its own bytes, or those of another tensor.
struct MadeStorage {
  // The storage's bytes, made of pieces (file ranges, zero fill, bytes computed on read: a
  // precision change, a tensor-parallel merge), so that none is held in memory. Held apart, so
  // that a decoded tensor carries no segment table; a copied tensor shares them.
  std::shared_ptr<VirtualFile> bytes;
  // A view (shape, storage_offset) into the storage of `storage_of`, whose bytes are written
  // once, as torch saves views of one flat buffer.
  const Tensor* storage_of = nullptr;
  // A storage longer than the shape (a vocabulary cut keeps its padding rows); 0 = numel().
  uint64_t storage_numel = 0;
};

// A tensor as _rebuild_tensor_v2 describes it. Offsets and strides are in elements. A decoded
// pickle's tensors name their storage record; a tree being written makes its tensors' storages.
struct Tensor {
  DType dtype = DType::F32;
  bool requires_grad = false;
  std::vector<int64_t> shape, stride;
  int64_t storage_offset = 0;
  const Node* attrs = nullptr;  // state of _rebuild_from_type_v2 (stage 3 ds_id), if any
  std::variant<MadeStorage, StorageRecord> storage;

  const StorageRecord& record() const { return std::get<StorageRecord>(storage); }
  const MadeStorage& made() const { return std::get<MadeStorage>(storage); }
  MadeStorage& made() { return std::get<MadeStorage>(storage); }
  // Writer: the bytes of the tensor's own storage, to append to.
  VirtualFile& bytes();

  uint64_t numel() const;
  bool contiguous() const;
  uint64_t nbytes() const { return numel() * element_size(dtype); }
  // Writer: the elements and bytes of the storage record its own storage is saved as.
  uint64_t write_numel() const;
  uint64_t write_bytes() const { return write_numel() * element_size(dtype); }
  // Reader: byte offset of element 0 in the source file.
  uint64_t byte_offset() const { return record().offset + uint64_t(storage_offset) * element_size(dtype); }
};

// The number of elements of a tensor of `shape` (1 for a 0-d tensor); throws FormatError when a
// pickle's shape overflows 64 bits.
uint64_t numel(const std::vector<int64_t>& shape);

enum class Kind : uint8_t {
  None,
  Bool,
  Int,
  BigInt,
  Float,
  Str,
  Bytes,
  List,
  Tuple,
  Dict,
  Set,
  Global,   // module + name, the class or function a GLOBAL names
  Object,   // REDUCE / NEWOBJ result of an unknown callable, plus BUILD state and items
  Storage,  // a persistent id naming a torch storage
  Tensor,
};

enum class Build : uint8_t { Reduce, NewObj };

// A dict's key -> entry map, built on the first lookup of a dict of 16 entries or more. A
// ZeRO-3 rank's state dict has one entry per parameter, and indexing asks each of them by name:
// a scan per lookup made indexing O(params^2). Built once and published atomically,
// so concurrent readers of one decoded pickle share it. Entries appended after it was built
// (a tree under construction) are still found: they are scanned, newest first.
class DictIndex {
 public:
  DictIndex() = default;
  DictIndex(const DictIndex&) {}  // an index belongs to its own node's entries: a copy makes its own
  DictIndex& operator=(const DictIndex&) {
    reset();
    return *this;
  }
  ~DictIndex() { reset(); }
  // Python's rule: of duplicate keys, the last one set wins.
  const Node* find(const Node& dict, std::string_view key) const;
  const Node* find(const Node& dict, int64_t key) const;
  struct Map;

 private:
  const Map* map(const Node& dict) const;
  void reset();
  mutable std::atomic<const Map*> map_{nullptr};
};

struct Node {
  Kind kind = Kind::None;
  bool b = false;        // Bool value
  bool ordered = false;  // Dict: an OrderedDict
  Build how = Build::Reduce;
  int64_t i = 0;                   // Int
  double f = 0;                    // Float
  std::string s;                   // Str, Bytes, BigInt (little-endian two's complement), Global module, Storage key
  std::string s2;                  // Global name
  std::vector<const Node*> items;  // List, Tuple, Set, Object list items
  std::vector<std::pair<const Node*, const Node*>> entries;  // Dict, Object dict items
  const Node* callee = nullptr;                              // Object
  const Node* args = nullptr;                                // Object
  const Node* state = nullptr;  // Object BUILD state; also BUILD on a Dict (state_dict _metadata)
  Tensor* tensor = nullptr;     // Tensor; Storage (dtype and record only)
  DictIndex index;              // Dict: lookups by key

  bool is(Kind k) const { return kind == k; }
  bool is_global(std::string_view module, std::string_view name) const {
    return kind == Kind::Global && s == module && s2 == name;
  }
  // Dict lookup by string key; nullptr when absent or not a dict. O(1) for a big dict.
  const Node* get(std::string_view key) const;
  // Dict lookup by int key (torch optimizer state is keyed by int).
  const Node* get(int64_t key) const;
  std::string_view kind_name() const;
};

// Memory for a BlockStore's block (value.cpp): a large one is mapped on its own, and one of 2 MiB
// or more is advised to the kernel as huge pages: a pickle of 100,000 tensors makes hundreds of
// MiB of nodes, and faulting them in 4 KiB at a time cost as much as decoding them.
void* block_alloc(size_t bytes);
void block_free(void* p, size_t bytes) noexcept;

// Owns every node and tensor of one decoded pickle (or of one built tree).
// Append-only storage with stable element addresses, in blocks that double from 64 elements to
// about 4 MiB: one allocation per block, few for a small pickle and huge pages for a big one.
// (std::deque allocates 512-byte chunks, i.e. one per 3 Nodes or 2 Tensors, and building a rank
// file of a 70B target makes tens of thousands of them: bench/README.md.)
template <typename T>
class BlockStore {
 public:
  BlockStore() = default;
  BlockStore(BlockStore&& o) noexcept : blocks_(std::move(o.blocks_)), cap_(o.cap_), n_(o.n_) { o.reset(); }
  BlockStore& operator=(BlockStore&& o) noexcept {
    if (this != &o) {
      clear();
      blocks_ = std::move(o.blocks_);
      cap_ = o.cap_;
      n_ = o.n_;
      o.reset();
    }
    return *this;
  }
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;
  ~BlockStore() { clear(); }

  T& emplace_back() {
    if (blocks_.empty() || blocks_.back().used == cap_) grow();
    Block& b = blocks_.back();
    T* x = ::new (static_cast<void*>(b.data + b.used)) T();
    ++b.used;
    ++n_;
    return *x;
  }
  T& emplace_back(T&& v) {
    T& x = emplace_back();
    x = std::move(v);
    return x;
  }
  size_t size() const { return n_; }

 private:
  static constexpr size_t kFirst = 64, kMaxBytes = size_t(4) << 20;
  struct Block {
    T* data = nullptr;
    size_t used = 0, cap = 0;
  };
  void grow() {
    cap_ = blocks_.empty() ? kFirst : std::max<size_t>(cap_, std::min(cap_ * 2, kMaxBytes / sizeof(T)));
    blocks_.push_back(Block{static_cast<T*>(block_alloc(cap_ * sizeof(T))), 0, cap_});
  }
  void clear() noexcept {
    for (Block& b : blocks_) {
      for (size_t k = 0; k < b.used; ++k) b.data[k].~T();
      block_free(b.data, b.cap * sizeof(T));
    }
    blocks_.clear();
  }
  void reset() noexcept {
    blocks_.clear();
    cap_ = n_ = 0;
  }
  std::vector<Block> blocks_;
  size_t cap_ = 0;  // elements in the last block
  size_t n_ = 0;
};

class Arena {
 public:
  Node* make(Kind k);
  Node* make_str(std::string s);
  Node* make_int(int64_t v);
  Node* make_tensor_node(Tensor t);
  Node* make_global(std::string module, std::string name);
  Tensor* make_tensor(Tensor t);
  size_t size() const { return nodes_.size(); }
  // Copies a subtree from another arena (e.g. a loss scaler object to re-emit); see Copier.
  const Node* copy(const Node* n);

 private:
  BlockStore<Node> nodes_;
  BlockStore<Tensor> tensors_;
};

// Copies values from any arena into one arena, depth-limited. A node met twice, in one call or
// across calls, is copied once: what the source shared stays shared (the writer then memoizes as
// torch.save's pickler did) and a cycle through the memo comes back to its copy. `hook` sees
// each node first and may give one to use instead (not copied further), or nullptr to copy it.
class Copier {
 public:
  using Hook = std::function<const Node*(const Node*)>;
  explicit Copier(Arena& into, Hook hook = {}) : a_(into), hook_(std::move(hook)) {}
  const Node* operator()(const Node* n) { return copy(n, 0); }

 private:
  const Node* copy(const Node* n, int depth);
  Arena& a_;
  Hook hook_;
  std::unordered_map<const Node*, const Node*> copies_;
};

// Short human rendering for error messages and `zeromount dump`: depth- and size-limited.
std::string repr(const Node* n, int max_depth = 2);

}  // namespace zm::pt
