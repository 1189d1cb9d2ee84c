// `.metadata` as torch writes it (protocol 5 from torch 2.x; any protocol decodes): NEWOBJ of each
// dataclass and BUILD with its field dict, TensorProperties' __getstate__ tuple, torch.Size as a
// REDUCE on a tuple (the pickle machine turns it into the tuple), storage_data keyed by
// MetadataIndex objects. Only the fields a reader needs are taken; unknown extra fields are
// ignored, as torch's unpickler would keep them without using them.
#include "zeromount/pt/dcp_read.h"

#include <sys/stat.h>

#include <algorithm>
#include <unordered_map>

#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/value.h"

namespace zm::pt::dcp {
namespace {

std::string dims(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + (v.size() == 1 ? ",)" : ")");
}

// storage_data is a dict keyed by MetadataIndex, whose equality is (fqn, offset) only: `index`
// is a hint (metadata.py). This is that key as bytes.
std::string index_key(std::string_view fqn, const std::vector<int64_t>* offsets) {
  std::string k(fqn);
  k.push_back('\0');
  if (!offsets) return k + 'N';
  k.push_back('T');
  for (int64_t o : *offsets) k.append(reinterpret_cast<const char*>(&o), sizeof o);
  return k;
}

// Why a relative_path may not be followed: torch joins it to the folder as it is, so an absolute
// path or a `..` would read a file outside the checkpoint. Empty when it is fine.
std::string escapes(const std::string& p) {
  if (p.empty()) return "is empty";
  if (p.find('\0') != std::string::npos) return "holds a NUL byte";
  if (p.front() == '/') return "is absolute";
  for (size_t a = 0; a <= p.size();) {
    size_t b = p.find('/', a);
    if (b == std::string::npos) b = p.size();
    if (p.compare(a, b - a, "..") == 0) return "leaves the folder ('..')";
    a = b + 1;
  }
  return {};
}

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}
  ReadMetadata read(const Node* root);

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw FormatError(where(path_, (key.empty() ? std::string() : "key '" + key + "': ") + what));
  }
  const Node* fields(const Node* n, std::string_view cls, const std::string& key) const;
  const Node* field(const Node* d, std::string_view name, const std::string& key) const;
  std::vector<int64_t> ints(const Node* n, const std::string& key, const char* what) const;
  int64_t count(const Node* n, const std::string& key, const char* what) const;
  DType dtype(const Node* properties, const std::string& key) const;
  void storage_data(const Node* d);
  StorageInfo storage(const std::string& fqn, const std::vector<int64_t>* offsets) const;
  void tensor(StoredKey& k, const Node* d) const;
  void check_cover(const StoredKey& k) const;
  static std::optional<std::string> checkpoint_id(const Node* storage_meta);

  const std::string& path_;
  std::unordered_map<std::string, StorageInfo> storages_;
};

// The field dict of a dataclass pickled as NEWOBJ + BUILD (a `(dict, slots)` state too).
const Node* Reader::fields(const Node* n, std::string_view cls, const std::string& key) const {
  if (!n->is(Kind::Object) || !n->callee || !n->callee->is(Kind::Global) || n->callee->s2 != cls ||
      !n->callee->s.starts_with("torch.distributed.checkpoint"))
    fail(key, "expected a " + std::string(cls) + ", found " + repr(n));
  const Node* s = n->state;
  if (s && s->is(Kind::Tuple) && s->items.size() == 2 && s->items[1]->is(Kind::Dict)) s = s->items[1];
  if (!s || !s->is(Kind::Dict)) fail(key, std::string(cls) + " without its fields");
  return s;
}

const Node* Reader::field(const Node* d, std::string_view name, const std::string& key) const {
  const Node* v = d->get(name);
  if (!v) fail(key, "missing field '" + std::string(name) + "'");
  return v;
}

std::vector<int64_t> Reader::ints(const Node* n, const std::string& key, const char* what) const {
  if (!n->is(Kind::Tuple) && !n->is(Kind::List)) fail(key, std::string(what) + " is not a tuple: " + repr(n));
  if (n->items.size() > 64) fail(key, std::string(what) + " has more than 64 dimensions");
  std::vector<int64_t> v;
  for (const Node* i : n->items) {
    if (!i->is(Kind::Int) || i->i < 0) fail(key, std::string(what) + " holds " + repr(i) + ", not a count");
    v.push_back(i->i);
  }
  return v;
}

int64_t Reader::count(const Node* n, const std::string& key, const char* what) const {
  if (!n->is(Kind::Int) || n->i < 0) fail(key, std::string(what) + " is " + repr(n) + ", not a byte count");
  return n->i;
}

// TensorProperties pickles (dtype, layout, requires_grad, memory_format, pin_memory) through
// __getstate__; before torch 2.1 it was a plain dataclass, its fields a dict.
DType Reader::dtype(const Node* properties, const std::string& key) const {
  if (!properties->is(Kind::Object) || !properties->callee || properties->callee->s2 != "TensorProperties")
    fail(key, "properties is not a TensorProperties: " + repr(properties));
  const Node* s = properties->state;
  const Node* d = nullptr;
  if (s && s->is(Kind::Tuple) && !s->items.empty()) d = s->items[0];
  if (s && s->is(Kind::Dict)) d = s->get("dtype");
  if (!d || !d->is_global("torch", d->s2)) fail(key, "properties without a torch dtype");
  for (int k = 0; k <= int(DType::C128); ++k)
    if (dtype_name(DType(k)) == d->s2) return DType(k);
  fail(key, "dtype torch." + d->s2 + " is not supported");
}

void Reader::storage_data(const Node* d) {
  if (!d->is(Kind::Dict)) fail("storage_data", "is not a dict");
  for (const auto& [index, info] : d->entries) {
    const Node* ix = fields(index, "MetadataIndex", "storage_data");
    const Node* fqn = field(ix, "fqn", "storage_data");
    if (!fqn->is(Kind::Str)) fail("storage_data", "MetadataIndex.fqn is not a str");
    const Node* off = ix->get("offset");
    std::vector<int64_t> offsets;
    if (off && !off->is(Kind::None)) offsets = ints(off, fqn->s, "MetadataIndex.offset");
    const Node* si = fields(info, "_StorageInfo", fqn->s);
    StorageInfo s;
    const Node* rel = field(si, "relative_path", fqn->s);
    if (!rel->is(Kind::Str)) fail(fqn->s, "relative_path is not a str");
    s.relative_path = rel->s;
    if (std::string why = escapes(s.relative_path); !why.empty())
      fail(fqn->s, "relative_path '" + s.relative_path + "' " + why);
    s.offset = uint64_t(count(field(si, "offset", fqn->s), fqn->s, "offset"));
    s.length = uint64_t(count(field(si, "length", fqn->s), fqn->s, "length"));
    // torch 2.6+ may compress or otherwise transform an item; its bytes are then no torch.save zip.
    const Node* t = si->get("transform_descriptors");
    if (t && !t->is(Kind::None) && !t->items.empty())
      fail(fqn->s, "its bytes are transformed (" + repr(t) + "): not supported");
    // A dict keeps the last value of equal keys.
    storages_[index_key(fqn->s, off && !off->is(Kind::None) ? &offsets : nullptr)] = std::move(s);
  }
}

StorageInfo Reader::storage(const std::string& fqn, const std::vector<int64_t>* offsets) const {
  auto it = storages_.find(index_key(fqn, offsets));
  if (it == storages_.end())
    fail(fqn, offsets ? "no storage_data entry for its chunk at offsets " + dims(*offsets)
                      : std::string("no storage_data entry for its bytes"));
  return it->second;
}

void Reader::tensor(StoredKey& k, const Node* d) const {
  k.dtype = dtype(field(d, "properties", k.fqn), k.fqn);
  k.size = ints(field(d, "size", k.fqn), k.fqn, "size");
  const Node* chunks = field(d, "chunks", k.fqn);
  if (!chunks->is(Kind::List)) fail(k.fqn, "chunks is not a list");
  for (const Node* c : chunks->items) {
    const Node* cf = fields(c, "ChunkStorageMetadata", k.fqn);
    StoredChunk sc;
    sc.offsets = ints(field(cf, "offsets", k.fqn), k.fqn, "chunk offsets");
    sc.sizes = ints(field(cf, "sizes", k.fqn), k.fqn, "chunk sizes");
    sc.storage = storage(k.fqn, &sc.offsets);
    k.chunks.push_back(std::move(sc));
  }
  check_cover(k);
}

// Every element of the tensor in exactly one chunk: each chunk inside the tensor, no two
// overlapping, and their volumes adding up to the tensor's. Sorted by their start along the
// dimension where starts differ most (rows for FSDP, columns for a column split), chunks only
// meet those that start before they end there: O(n log n) for runs along one dimension,
// O(n x boxes per band) for a grid of boxes.
void Reader::check_cover(const StoredKey& k) const {
  uint64_t numel = 1;
  for (int64_t d : k.size)
    if (__builtin_mul_overflow(numel, uint64_t(d), &numel)) fail(k.fqn, "size " + dims(k.size) + " overflows");
  uint64_t covered = 0;
  std::vector<const StoredChunk*> boxes;  // those holding an element
  for (const StoredChunk& c : k.chunks) {
    if (c.offsets.size() != k.size.size() || c.sizes.size() != k.size.size())
      fail(k.fqn, "chunk at offsets " + dims(c.offsets) + " has another rank than the tensor " + dims(k.size));
    uint64_t volume = 1;
    for (size_t d = 0; d < k.size.size(); ++d) {
      if (c.offsets[d] > k.size[d] || c.sizes[d] > k.size[d] - c.offsets[d])
        fail(k.fqn, "chunk at offsets " + dims(c.offsets) + " of sizes " + dims(c.sizes) + " lies outside the tensor " +
                        dims(k.size));
      volume *= uint64_t(c.sizes[d]);  // inside the tensor: no overflow
    }
    if (__builtin_add_overflow(covered, volume, &covered)) covered = UINT64_MAX;
    if (volume) boxes.push_back(&c);
  }
  if (k.size.empty() && boxes.size() > 1)
    fail(k.fqn, "chunks overlap: " + std::to_string(boxes.size()) + " chunks of a 0-d tensor");
  size_t sweep = 0, most = 0;
  for (size_t d = 0; d < k.size.size() && boxes.size() > 1; ++d) {
    std::vector<int64_t> starts;
    for (const StoredChunk* c : boxes) starts.push_back(c->offsets[d]);
    std::sort(starts.begin(), starts.end());  // not std::ranges: clang 14 (the fuzz build) cannot take it
    const auto distinct = size_t(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (distinct > most) {
      most = distinct;
      sweep = d;
    }
  }
  if (boxes.size() > 1) std::ranges::sort(boxes, {}, [&](const StoredChunk* c) { return c->offsets[sweep]; });
  for (size_t i = 0; i + 1 < boxes.size(); ++i) {
    const StoredChunk& a = *boxes[i];
    const int64_t end = a.offsets[sweep] + a.sizes[sweep];
    for (size_t j = i + 1; j < boxes.size() && boxes[j]->offsets[sweep] < end; ++j) {
      const StoredChunk& b = *boxes[j];
      bool meet = true;
      for (size_t d = 0; d < k.size.size() && meet; ++d)
        meet = b.offsets[d] < a.offsets[d] + a.sizes[d] && a.offsets[d] < b.offsets[d] + b.sizes[d];
      if (meet) fail(k.fqn, "chunks at offsets " + dims(a.offsets) + " and " + dims(b.offsets) + " overlap");
    }
  }
  if (covered != numel)
    fail(k.fqn, "chunks leave a hole: they cover " + std::to_string(covered) + " of " + std::to_string(numel) +
                    " elements of " + dims(k.size));
}

// StorageMeta.checkpoint_id: a str, or a pathlib path (REDUCE of the class on its parts).
// Informative only, so a form not known here reads as absent rather than refusing the folder.
std::optional<std::string> Reader::checkpoint_id(const Node* storage_meta) {
  if (!storage_meta || !storage_meta->is(Kind::Object) || !storage_meta->state || !storage_meta->state->is(Kind::Dict))
    return std::nullopt;
  const Node* id = storage_meta->state->get("checkpoint_id");
  if (!id) return std::nullopt;
  if (id->is(Kind::Str)) return id->s;
  if (!id->is(Kind::Object) || !id->callee || !id->callee->s.starts_with("pathlib") || !id->args) return std::nullopt;
  std::string s;
  for (const Node* part : id->args->items) {
    if (!part->is(Kind::Str)) return std::nullopt;
    if (!s.empty() && s.back() != '/') s += '/';
    s += part->s;
  }
  return s;
}

ReadMetadata Reader::read(const Node* root) {
  const Node* md = fields(root, "Metadata", "");
  ReadMetadata out;
  out.path = path_;
  if (const Node* v = md->get("version"); v && v->is(Kind::Str)) out.version = v->s;
  out.checkpoint_id = checkpoint_id(md->get("storage_meta"));
  storage_data(field(md, "storage_data", ""));
  const Node* planner = md->get("planner_data");
  if (planner && !planner->is(Kind::Dict) && !planner->is(Kind::None)) fail("planner_data", "is not a dict");
  const Node* sdm = field(md, "state_dict_metadata", "");
  if (!sdm->is(Kind::Dict)) fail("state_dict_metadata", "is not a dict");
  std::unordered_map<std::string_view, size_t> seen;
  for (const auto& [key, meta] : sdm->entries) {
    if (!key->is(Kind::Str)) fail("state_dict_metadata", "a key is not a str: " + repr(key));
    StoredKey k;
    k.fqn = key->s;
    if (const Node* p = planner && planner->is(Kind::Dict) ? planner->get(k.fqn) : nullptr) {
      if (!p->is(Kind::Tuple) && !p->is(Kind::List)) fail(k.fqn, "planner_data path is not a tuple");
      for (const Node* part : p->items) {
        if (part->is(Kind::Str))
          k.path.emplace_back(part->s);
        else if (part->is(Kind::Int))
          k.path.emplace_back(part->i);
        else
          fail(k.fqn, "planner_data path holds " + repr(part));
      }
    }
    if (meta->is(Kind::Object) && meta->callee && meta->callee->s2 == "BytesStorageMetadata") {
      k.tensor = false;
      k.chunks.push_back({{}, {}, storage(k.fqn, nullptr)});
    } else {
      tensor(k, fields(meta, "TensorStorageMetadata", k.fqn));
    }
    // Python's dict: a key set twice keeps its first place and its last value.
    if (auto [it, fresh] = seen.try_emplace(key->s, out.keys.size()); !fresh)
      out.keys[it->second] = std::move(k);
    else
      out.keys.push_back(std::move(k));
  }
  return out;
}

}  // namespace

ReadMetadata read_metadata(std::string_view bytes, const std::string& path) {
  Arena arena;
  const StorageResolver no_storages = [&](const std::string& key, uint64_t) -> uint64_t {
    throw FormatError(where(path, "a tensor storage ('" + key + "') in a .metadata pickle"));
  };
  return Reader(path).read(decode_pickle(bytes, arena, path, no_storages));
}

ReadMetadata read_metadata(const File& file) {
  return read_metadata(file.read_string(0, file.size(), ".metadata"), file.path());
}

void check_against_files(const ReadMetadata& md, const DataFileSize& size_of) {
  std::unordered_map<std::string, std::optional<uint64_t>> sizes;
  for (const StoredKey& k : md.keys) {
    for (const StoredChunk& c : k.chunks) {
      const StorageInfo& s = c.storage;
      auto it = sizes.find(s.relative_path);
      if (it == sizes.end()) it = sizes.emplace(s.relative_path, size_of(s.relative_path)).first;
      if (!it->second)
        throw FormatError(where(md.path, "key '" + k.fqn + "': data file '" + s.relative_path + "' does not exist"));
      if (s.offset > *it->second || s.length > *it->second - s.offset)
        throw FormatError(where(md.path, "key '" + k.fqn + "': item @" + std::to_string(s.offset) + " +" +
                                             std::to_string(s.length) + " ends past the end of '" + s.relative_path +
                                             "' (" + std::to_string(*it->second) + " bytes)"));
    }
  }
}

void check_folder(const ReadMetadata& md, const std::string& folder) {
  check_against_files(md, [&](const std::string& rel) -> std::optional<uint64_t> {
    struct stat st {};
    if (::stat((folder + "/" + rel).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    return uint64_t(st.st_size);
  });
}

}  // namespace zm::pt::dcp
