#pragma once
// torch.distributed.checkpoint (DCP) on disk [dcp]: the `.metadata` pickle that
// names every item of a checkpoint folder, its chunks and the byte range of a data file that holds
// each one. Items themselves are plain torch.save archives (pt_writer.h). `.metadata` is written as
// a stream of protocol-2 opcodes, in blocks made on read: its size grows with the chunks, the
// memory that makes it does not.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "zeromount/pt/dtype.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::pt::dcp {

// A rectangular piece of a tensor, stored as one item at [offset, offset + length) of files[file].
struct Chunk {
  std::vector<int64_t> offsets, sizes;  // per dimension; both empty for a 0-d tensor
  uint32_t file = 0;
  uint64_t offset = 0, length = 0;
};

// One key of the flattened state dict. A tensor has chunks that cover it; an object (a float, a
// list of names) is one pickled item, its chunk's offsets and sizes empty. Several keys may name
// the same bytes (torchtitan's family beside torch's).
struct Item {
  std::string fqn;                                       // "optimizer.state.fc1.weight.exp_avg"
  std::vector<std::variant<std::string, int64_t>> path;  // planner_data: ("optimizer", "state", ...)
  bool tensor = true;
  DType dtype = DType::F32;
  std::vector<int64_t> size;
  std::vector<Chunk> chunks;  // an object: exactly one
};

// What `.metadata` says, made on demand so that a folder of millions of chunks is never held as
// items: the writer asks for one item, or one chunk of it, at a time.
class MetadataSource {
 public:
  virtual ~MetadataSource() = default;
  virtual size_t items() const = 0;
  // Item `i` with its chunks left empty; `chunk_count` says how many it has (an object: 1).
  virtual void item(size_t i, Item& out, size_t& chunk_count) const = 0;
  virtual void chunk(size_t i, size_t k, Chunk& out) const = 0;
  virtual size_t files() const = 0;  // the data files chunks name, by position
  virtual std::string file_name(size_t k) const = 0;
};

// Where `.metadata` is cut into blocks that are made again when read: the stream's position at
// the start of each block (about kMetadataBlock bytes apart) and the file's exact size.
struct MetadataLayout {
  struct Cursor {
    uint32_t section = 0;
    uint64_t item = 0, part = 0;
  };
  struct Block {
    Cursor from;
    uint64_t start = 0;
  };
  std::vector<Block> blocks;
  uint64_t size = 0;
  uint64_t bytes() const { return sizeof(*this) + blocks.capacity() * sizeof(Block); }
};
inline constexpr uint64_t kMetadataBlock = uint64_t(64) << 10;

// One pass over `src` that counts the bytes and keeps only where each block starts: memory is a
// block's bytes and a cursor per block, whatever the number of chunks.
MetadataLayout layout_metadata(const MetadataSource& src);
// The `.metadata` file: one computed piece per block, each made from `src` when read.
VirtualFile metadata_file(std::shared_ptr<const MetadataSource> src, const MetadataLayout& layout);
// The whole file's bytes for `items` (small folders and tests).
std::string metadata(const std::vector<Item>& items, const std::vector<std::string>& files);

// FSDP2's rows of a tensor of `rows` rows at `world` ranks: torch.chunk's rule on dim 0 (chunks
// of ceil(rows / world), the last ones shorter or missing). Rank r's rows are [first, first + n).
struct Rows {
  int64_t first = 0, n = 0;
};
Rows fsdp_rows(int64_t rows, int world, int rank);
// How many ranks get rows by that rule: the chunks FSDP2 saves of such a tensor (1 for no rows).
int fsdp_ranks_with_rows(int64_t rows, int world);

// Data file names as torch's FileSystemWriter makes them: "__<rank>_0.distcp", and the rank such
// a name holds (digits without a leading zero), else nullopt.
std::string data_file_name(int rank);
std::optional<int> data_file_rank(std::string_view name);

}  // namespace zm::pt::dcp
