#include "zeromount/pt/value.h"

#include <sys/mman.h>

#include <cstdlib>
#include <functional>
#include <unordered_map>

#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"

namespace zm::pt {

namespace {

constexpr size_t kMapped = size_t(256) << 10, kHuge = size_t(2) << 20;

size_t mapped_bytes(size_t bytes) {
  return bytes >= kHuge ? (bytes + kHuge - 1) / kHuge * kHuge : bytes;
}

}  // namespace

void* block_alloc(size_t bytes) {
  if (bytes < kMapped) {
    if (void* p = std::malloc(bytes)) return p;
    throw std::bad_alloc();
  }
  // Mapped apart from the heap, so that freeing a decoded pickle gives its pages back at once
  // rather than leaving holes in the heap until a trim.
  void* p = ::mmap(nullptr, mapped_bytes(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (bytes >= kHuge) ::madvise(p, mapped_bytes(bytes), MADV_HUGEPAGE);  // advice: 4 KiB pages without THP
  return p;
}

void block_free(void* p, size_t bytes) noexcept {
  if (bytes < kMapped)
    std::free(p);
  else
    ::munmap(p, mapped_bytes(bytes));
}

VirtualFile& Tensor::bytes() {
  MadeStorage& m = made();
  // A copied tensor shares its pieces (a copy is cheap); the first append gives it its own, so
  // that appending to one tensor never changes another (trees are built by one thread).
  if (!m.bytes)
    m.bytes = std::make_shared<VirtualFile>();
  else if (m.bytes.use_count() > 1)
    m.bytes = std::make_shared<VirtualFile>(*m.bytes);
  return *m.bytes;
}

uint64_t Tensor::write_numel() const {
  return std::max(made().storage_numel, numel());
}

uint64_t numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) throw FormatError("shape numel overflows");
  return n;
}

uint64_t Tensor::numel() const {
  return pt::numel(shape);
}

bool Tensor::contiguous() const {
  int64_t expect = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] != 1 && stride[k] != expect) return false;
    expect *= shape[k];
  }
  return true;
}

namespace {
constexpr size_t kIndexFrom = 16;  // below this a scan is cheaper than a hash

bool same(const Node* k, std::string_view key) {
  return k->kind == Kind::Str && k->s == key;
}
bool same(const Node* k, int64_t key) {
  return k->kind == Kind::Int && k->i == key;
}
}  // namespace

struct DictIndex::Map {
  size_t n = 0;  // entries[0, n) are in the maps
  std::unordered_map<std::string_view, const Node*> str;
  std::unordered_map<int64_t, const Node*> ints;
};

const DictIndex::Map* DictIndex::map(const Node& dict) const {
  if (const Map* m = map_.load(std::memory_order_acquire)) return m;
  if (dict.entries.size() < kIndexFrom) return nullptr;
  auto m = std::make_unique<Map>();
  m->n = dict.entries.size();
  for (const auto& [k, v] : dict.entries) {  // in order: a later duplicate overwrites
    if (k->kind == Kind::Str) m->str[k->s] = v;
    if (k->kind == Kind::Int) m->ints[k->i] = v;
  }
  const Map* expected = nullptr;
  if (map_.compare_exchange_strong(expected, m.get(), std::memory_order_acq_rel)) return m.release();
  return expected;  // another reader built it first
}

void DictIndex::reset() {
  delete map_.exchange(nullptr);
}

template <typename K>
static const Node* find_in(const Node& dict, const DictIndex::Map* m, const std::unordered_map<K, const Node*>* keyed,
                           K key) {
  const size_t from = m ? m->n : 0;
  for (size_t i = dict.entries.size(); i-- > from;)  // newest first: the last one set wins
    if (same(dict.entries[i].first, key)) return dict.entries[i].second;
  if (!keyed) return nullptr;
  auto it = keyed->find(key);
  return it == keyed->end() ? nullptr : it->second;
}

const Node* DictIndex::find(const Node& dict, std::string_view key) const {
  const Map* m = map(dict);
  return find_in<std::string_view>(dict, m, m ? &m->str : nullptr, key);
}

const Node* DictIndex::find(const Node& dict, int64_t key) const {
  const Map* m = map(dict);
  return find_in<int64_t>(dict, m, m ? &m->ints : nullptr, key);
}

const Node* Node::get(std::string_view key) const {
  return kind == Kind::Dict ? index.find(*this, key) : nullptr;
}

const Node* Node::get(int64_t key) const {
  return kind == Kind::Dict ? index.find(*this, key) : nullptr;
}

std::string_view Node::kind_name() const {
  switch (kind) {
    case Kind::None:
      return "None";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
    case Kind::BigInt:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::Str:
      return "str";
    case Kind::Bytes:
      return "bytes";
    case Kind::List:
      return "list";
    case Kind::Tuple:
      return "tuple";
    case Kind::Dict:
      return ordered ? "OrderedDict" : "dict";
    case Kind::Set:
      return "set";
    case Kind::Global:
      return "global";
    case Kind::Object:
      return "object";
    case Kind::Storage:
      return "storage";
    case Kind::Tensor:
      return "tensor";
  }
  return "?";
}

Node* Arena::make(Kind k) {
  Node& n = nodes_.emplace_back();
  n.kind = k;
  return &n;
}

Node* Arena::make_str(std::string s) {
  Node* n = make(Kind::Str);
  n->s = std::move(s);
  return n;
}

Node* Arena::make_int(int64_t v) {
  Node* n = make(Kind::Int);
  n->i = v;
  return n;
}

Node* Arena::make_global(std::string module, std::string name) {
  Node* n = make(Kind::Global);
  n->s = std::move(module);
  n->s2 = std::move(name);
  return n;
}

Tensor* Arena::make_tensor(Tensor t) {
  return &tensors_.emplace_back(std::move(t));
}

Node* Arena::make_tensor_node(Tensor t) {
  Node* n = make(Kind::Tensor);
  n->tensor = make_tensor(std::move(t));
  return n;
}

const Node* Arena::copy(const Node* n) {
  return Copier(*this)(n);
}

const Node* Copier::copy(const Node* n, int depth) {
  if (!n) return nullptr;
  if (auto it = copies_.find(n); it != copies_.end()) return it->second;
  if (depth > 200) throw FormatError("value nested too deeply to copy");
  if (const Node* instead = hook_ ? hook_(n) : nullptr) return copies_[n] = instead;
  Node* c = a_.make(n->kind);
  copies_[n] = c;  // before the children: a cycle comes back to this copy
  c->b = n->b;
  c->ordered = n->ordered;
  c->how = n->how;
  c->i = n->i;
  c->f = n->f;
  c->s = n->s;
  c->s2 = n->s2;
  for (const Node* it : n->items) c->items.push_back(copy(it, depth + 1));
  for (const auto& [k, v] : n->entries) c->entries.emplace_back(copy(k, depth + 1), copy(v, depth + 1));
  c->callee = copy(n->callee, depth + 1);
  c->args = copy(n->args, depth + 1);
  c->state = copy(n->state, depth + 1);
  if (n->tensor) {
    Tensor t = *n->tensor;
    t.attrs = copy(t.attrs, depth + 1);
    c->tensor = a_.make_tensor(std::move(t));
  }
  return c;
}

namespace {

void render(std::string& out, const Node* n, int depth, int max_depth) {
  if (out.size() > 400) return;
  if (!n) {
    out += "<null>";
    return;
  }
  switch (n->kind) {
    case Kind::None:
      out += "None";
      return;
    case Kind::Bool:
      out += n->b ? "True" : "False";
      return;
    case Kind::Int:
      out += std::to_string(n->i);
      return;
    case Kind::BigInt:
      out += "<bigint>";
      return;
    case Kind::Float:
      out += format_double(n->f);
      return;
    case Kind::Str:
      out += "'" + n->s.substr(0, 80) + "'";
      return;
    case Kind::Bytes:
      out += "b<" + std::to_string(n->s.size()) + ">";
      return;
    case Kind::Global:
      out += n->s + "." + n->s2;
      return;
    case Kind::Storage:
      out += "storage(" + n->tensor->record().key + ")";
      return;
    case Kind::Tensor: {
      out += "tensor " + std::string(dtype_name(n->tensor->dtype)) + "[";
      for (size_t k = 0; k < n->tensor->shape.size(); ++k) out += (k ? ", " : "") + std::to_string(n->tensor->shape[k]);
      out += "]";
      return;
    }
    case Kind::Object:
      out += "<";
      render(out, n->callee, depth + 1, max_depth);
      out += ">";
      return;
    default:
      break;
  }
  if (depth >= max_depth) {
    out += std::string(n->kind_name()) + "[...]";
    return;
  }
  bool dict = n->kind == Kind::Dict;
  out += dict ? "{" : n->kind == Kind::Tuple ? "(" : "[";
  size_t count = dict ? n->entries.size() : n->items.size();
  for (size_t k = 0; k < count && k < 8; ++k) {
    if (k) out += ", ";
    if (dict) {
      render(out, n->entries[k].first, depth + 1, max_depth);
      out += ": ";
      render(out, n->entries[k].second, depth + 1, max_depth);
    } else {
      render(out, n->items[k], depth + 1, max_depth);
    }
  }
  if (count > 8) out += ", ...";
  out += dict ? "}" : n->kind == Kind::Tuple ? ")" : "]";
}

}  // namespace

std::string repr(const Node* n, int max_depth) {
  std::string out;
  render(out, n, 0, max_depth);
  return out;
}

}  // namespace zm::pt
