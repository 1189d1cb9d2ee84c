#include "zeromount/pt/dcp.h"

#include <algorithm>
#include <cstring>

#include "pickle_ops.h"
#include "zeromount/pt/error.h"

namespace zm::pt::dcp {

namespace {

constexpr const char* kMeta = "torch.distributed.checkpoint.metadata";

// The memo is filled once, in the preamble, with every global and key name the items repeat and
// every data file's name; the items only BINGET them and put nothing. So an item's bytes depend
// on the item alone, and any block of the stream can be made again from where it starts.
enum Memo : uint32_t {
  kMetadata,
  kTensorMeta,
  kBytesMeta,
  kChunkMeta,
  kProperties,
  kIndex,
  kStorageInfo,
  kSize,
  kLayout,
  kMemFormat,
  kStrOffsets,
  kStrSizes,
  kStrFqn,
  kStrOffset,
  kStrIndex,
  kStrPath,
  kStrLength,
  kStrProperties,
  kStrSize,
  kStrChunks,
  kStrStrided,
  kFirstFile  // file k is kFirstFile + k
};

struct Global {
  const char *module, *name;
};
constexpr Global kGlobals[] = {{kMeta, "Metadata"},
                               {kMeta, "TensorStorageMetadata"},
                               {kMeta, "BytesStorageMetadata"},
                               {kMeta, "ChunkStorageMetadata"},
                               {kMeta, "TensorProperties"},
                               {kMeta, "MetadataIndex"},
                               {"torch.distributed.checkpoint.filesystem", "_StorageInfo"},
                               {"torch", "Size"},
                               {"torch.serialization", "_get_layout"},
                               {kMeta, "_MEM_FORMAT_ENCODING"}};
constexpr const char* kStrings[] = {"offsets", "sizes",      "fqn",  "offset", "index",        "relative_path",
                                    "length",  "properties", "size", "chunks", "torch.strided"};
static_assert(std::size(kGlobals) == kStrOffsets && kStrOffsets + std::size(kStrings) == kFirstFile);

// The stream's sections, in order; a part is one unit of bytes within an item of a section.
enum Section : uint32_t {
  kPreamble,     // PROTO and the constant memo entries
  kFileNames,    // one part per data file: its name, memoized
  kOpen,         // Metadata's state dict, then state_dict_metadata's
  kStorageMeta,  // per item: its head, one part per chunk, its tail
  kToPlanner,    // planner_data
  kPlanner,      // per item: its path
  kToStorage,    // storage_data
  kStorage,      // per item, one part per chunk: MetadataIndex -> _StorageInfo
  kClose,        // storage_meta, version, STOP
  kEnd
};

using Cursor = MetadataLayout::Cursor;

// Walks the stream part by part. The current item is fetched once, however many parts it has.
class Writer {
 public:
  explicit Writer(const MetadataSource& src) : src_(src) {}

  // Appends the part at `c` to `w`; returns false past the end.
  bool emit(const Cursor& c, std::string& w) {
    switch (Section(c.section)) {
      case kPreamble:
        w += "\x80\x02";
        for (uint32_t g = 0; g < std::size(kGlobals); ++g)
          remember(w, g, [&] { ops::global(w, kGlobals[g].module, kGlobals[g].name); });
        for (uint32_t s = 0; s < std::size(kStrings); ++s)
          remember(w, kStrOffsets + s, [&] { ops::str(w, kStrings[s]); });
        return true;
      case kFileNames:
        remember(w, uint32_t(kFirstFile + c.item), [&] { ops::str(w, src_.file_name(c.item)); });
        return true;
      case kOpen:
        object(w, kMetadata);
        w += "}(";
        ops::str(w, "state_dict_metadata");
        w += "}(";
        return true;
      case kStorageMeta:
        storage_meta(c, w);
        return true;
      case kToPlanner:
        w += 'u';
        ops::str(w, "planner_data");
        w += "}(";
        return true;
      case kPlanner:
        planner(c, w);
        return true;
      case kToStorage:
        w += 'u';
        ops::str(w, "storage_data");
        w += "}(";
        return true;
      case kStorage:
        storage(c, w);
        return true;
      case kClose:
        w += 'u';
        ops::str(w, "storage_meta");
        w += 'N';
        ops::str(w, "version");
        ops::str(w, "1.0.0");
        w += "ub.";
        return true;
      case kEnd:
        return false;
    }
    return false;
  }

  // The part after `c`, skipping items and sections with nothing in them (a tensor saved with no
  // chunk has none in storage_data).
  void next(Cursor& c) {
    if (++c.part < parts(c)) return;
    c.part = 0;
    ++c.item;
    settle(c);
  }
  Cursor first() {
    Cursor c;
    settle(c);
    return c;
  }

 private:
  template <typename F>
  static void remember(std::string& w, uint32_t idx, F&& write) {
    write();
    ops::put(w, idx);
    w += '0';  // POP: the value stays in the memo only
  }
  // NEWOBJ of a memoized class with no arguments.
  static void object(std::string& w, uint32_t cls) {
    ops::get(w, cls);
    w += ")\x81";
  }
  static void torch_size(std::string& w, const std::vector<int64_t>& dims) {
    ops::get(w, kSize);
    w += '(';
    for (int64_t d : dims) ops::integer(w, d);
    w += "t\x85R";  // torch.Size((dims,))
  }

  void settle(Cursor& c) {
    for (;; ++c.item) {
      while (c.section < kEnd && c.item >= items(c.section)) {
        ++c.section;
        c.item = 0;
      }
      if (c.section >= kEnd || parts(c) > 0) return;
    }
  }
  uint64_t items(uint32_t section) const {
    switch (section) {
      case kFileNames:
        return src_.files();
      case kStorageMeta:
      case kPlanner:
      case kStorage:
        return src_.items();
      default:
        return 1;
    }
  }
  uint64_t parts(const Cursor& c) {
    switch (c.section) {
      case kStorageMeta:
        return at(c.item).tensor ? chunks_ + 2 : 1;
      case kStorage:
        at(c.item);
        return chunks_;
      default:
        return 1;
    }
  }
  const Item& at(uint64_t i) {
    if (i != item_at_) {
      src_.item(size_t(i), item_, chunks_);
      item_at_ = i;
    }
    return item_;
  }

  void storage_meta(const Cursor& c, std::string& w) {
    const Item& it = at(c.item);
    if (c.part == 0) {
      ops::str(w, it.fqn);
      if (!it.tensor) return object(w, kBytesMeta);
      object(w, kTensorMeta);
      w += "}(";
      ops::get(w, kStrProperties);
      properties(w, it.dtype);
      ops::get(w, kStrSize);
      torch_size(w, it.size);
      ops::get(w, kStrChunks);
      w += "](";
    } else if (c.part <= chunks_) {
      src_.chunk(size_t(c.item), size_t(c.part - 1), chunk_);
      object(w, kChunkMeta);
      w += "}(";
      ops::get(w, kStrOffsets);
      torch_size(w, chunk_.offsets);
      ops::get(w, kStrSizes);
      torch_size(w, chunk_.sizes);
      w += "ub";
    } else {
      w += "eub";  // the chunks' APPENDS, the state's SETITEMS, BUILD
    }
  }
  // TensorProperties' __getstate__: (dtype, layout, requires_grad, memory format, pin_memory).
  static void properties(std::string& w, DType dtype) {
    object(w, kProperties);
    w += '(';
    ops::global(w, "torch", dtype_name(dtype));
    ops::get(w, kLayout);
    ops::get(w, kStrStrided);
    w += "\x85R\x89";
    ops::get(w, kMemFormat);
    ops::integer(w, 0);
    w += "\x85R\x89tb";
  }
  void planner(const Cursor& c, std::string& w) {
    const Item& it = at(c.item);
    ops::str(w, it.fqn);
    w += '(';
    for (const auto& p : it.path) {
      if (const auto* i = std::get_if<int64_t>(&p))
        ops::integer(w, *i);
      else
        ops::str(w, std::get<std::string>(p));
    }
    w += 't';
  }
  void storage(const Cursor& c, std::string& w) {
    const Item& it = at(c.item);
    src_.chunk(size_t(c.item), size_t(c.part), chunk_);
    if (chunk_.file >= src_.files())
      throw Error("DCP .metadata: " + it.fqn + " names data file " + std::to_string(chunk_.file) + " of " +
                  std::to_string(src_.files()));
    object(w, kIndex);
    w += "}(";
    ops::get(w, kStrFqn);
    ops::str(w, it.fqn);
    ops::get(w, kStrOffset);
    if (it.tensor)
      torch_size(w, chunk_.offsets);
    else
      w += 'N';
    ops::get(w, kStrIndex);
    if (it.tensor)
      ops::integer(w, int64_t(c.part));
    else
      w += 'N';
    w += "ub";
    object(w, kStorageInfo);
    w += "}(";
    ops::get(w, kStrPath);
    ops::get(w, uint32_t(kFirstFile + chunk_.file));
    ops::get(w, kStrOffset);
    ops::integer(w, int64_t(chunk_.offset));
    ops::get(w, kStrLength);
    ops::integer(w, int64_t(chunk_.length));
    w += "ub";  // storage_data's SETITEMS comes with kClose
  }

  const MetadataSource& src_;
  uint64_t item_at_ = UINT64_MAX;
  Item item_;
  size_t chunks_ = 0;
  Chunk chunk_;
};

// A block of the stream, made again whenever it is read.
class Block final : public Computed {
 public:
  Block(std::shared_ptr<const MetadataSource> src, Cursor from, uint64_t size)
      : src_(std::move(src)), from_(from), size_(size) {}
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, void* out, size_t n, const ExtentReader&) const override {
    Writer w(*src_);
    std::string bytes;
    bytes.reserve(size_t(size_));
    for (Cursor c = from_; bytes.size() < size_ && w.emit(c, bytes); w.next(c)) {
    }
    if (bytes.size() != size_)
      throw Error("DCP .metadata: a block made again is " + std::to_string(bytes.size()) + " bytes, not " +
                  std::to_string(size_) + " (its source changed)");
    std::memcpy(out, bytes.data() + offset, n);
  }
  size_t memory_bytes() const override { return sizeof(*this); }

 private:
  std::shared_ptr<const MetadataSource> src_;
  Cursor from_;
  uint64_t size_;
};

// A source over items held whole.
class HeldItems final : public MetadataSource {
 public:
  HeldItems(const std::vector<Item>& items, const std::vector<std::string>& files) : items_(items), files_(files) {}
  size_t items() const override { return items_.size(); }
  void item(size_t i, Item& out, size_t& chunk_count) const override {
    const Item& it = items_.at(i);
    out.fqn = it.fqn;
    out.path = it.path;
    out.tensor = it.tensor;
    out.dtype = it.dtype;
    out.size = it.size;
    chunk_count = it.chunks.size();
  }
  void chunk(size_t i, size_t k, Chunk& out) const override { out = items_.at(i).chunks.at(k); }
  size_t files() const override { return files_.size(); }
  std::string file_name(size_t k) const override { return files_.at(k); }

 private:
  const std::vector<Item>& items_;
  const std::vector<std::string>& files_;
};

}  // namespace

MetadataLayout layout_metadata(const MetadataSource& src) {
  MetadataLayout layout;
  Writer w(src);
  std::string part;
  uint64_t block_bytes = 0;
  for (Cursor c = w.first(); c.section < kEnd; w.next(c)) {
    if (layout.blocks.empty() || block_bytes >= kMetadataBlock) {
      layout.blocks.push_back({c, layout.size});
      block_bytes = 0;
    }
    part.clear();
    w.emit(c, part);
    layout.size += part.size();
    block_bytes += part.size();
  }
  layout.blocks.shrink_to_fit();
  return layout;
}

VirtualFile metadata_file(std::shared_ptr<const MetadataSource> src, const MetadataLayout& layout) {
  VirtualFile f;
  f.reserve(layout.blocks.size());
  for (size_t b = 0; b < layout.blocks.size(); ++b) {
    const uint64_t end = b + 1 < layout.blocks.size() ? layout.blocks[b + 1].start : layout.size;
    f.append_computed(std::make_shared<Block>(src, layout.blocks[b].from, end - layout.blocks[b].start));
  }
  return f;
}

std::string metadata(const std::vector<Item>& items, const std::vector<std::string>& files) {
  const HeldItems src(items, files);
  Writer w(src);
  std::string out;
  for (Cursor c = w.first(); w.emit(c, out); w.next(c)) {
  }
  return out;
}

Rows fsdp_rows(int64_t rows, int world, int rank) {
  const int64_t each = (rows + world - 1) / world;
  const int64_t first = std::min<int64_t>(each * rank, rows);
  return {first, std::min<int64_t>(each, rows - first)};
}

int fsdp_ranks_with_rows(int64_t rows, int world) {
  if (rows <= 0 || world <= 1) return 1;
  const int64_t each = (rows + world - 1) / world;
  return int((rows + each - 1) / each);
}

std::string data_file_name(int rank) {
  return "__" + std::to_string(rank) + "_0.distcp";
}

std::optional<int> data_file_rank(std::string_view name) {
  constexpr std::string_view kHead = "__", kTail = "_0.distcp";
  if (!name.starts_with(kHead) || !name.ends_with(kTail)) return std::nullopt;
  const std::string_view digits = name.substr(kHead.size(), name.size() - kHead.size() - kTail.size());
  if (digits.empty() || digits.size() > 9 || (digits[0] == '0' && digits.size() > 1)) return std::nullopt;
  int r = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    r = r * 10 + (c - '0');
  }
  return r;
}

}  // namespace zm::pt::dcp
