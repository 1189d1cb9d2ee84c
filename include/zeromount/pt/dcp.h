#pragma once
// torch.distributed.checkpoint (DCP) on disk (spec torch-dcp.md): the `.metadata` pickle that
// names every item of a checkpoint folder, its chunks and the byte range of a data file that holds
// each one. Items themselves are plain torch.save archives (pt_writer.h). Built as a value tree and
// written by the pickle writer: no Python runs.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "zeromount/pt/dtype.h"

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

// The `.metadata` file's bytes for these items, whose data files are `files` (relative paths).
std::string metadata(const std::vector<Item>& items, const std::vector<std::string>& files);

// FSDP2's rows of a tensor of `rows` rows at `world` ranks: torch.chunk's rule on dim 0 (chunks
// of ceil(rows / world), the last ones shorter or missing). Rank r's rows are [first, first + n).
struct Rows {
  int64_t first = 0, n = 0;
};
Rows fsdp_rows(int64_t rows, int world, int rank);

// Data file names as torch's FileSystemWriter makes them: "__<rank>_0.distcp".
std::string data_file_name(int rank);

}  // namespace zm::pt::dcp
