#pragma once
// An item of a DCP data file is a whole torch.save archive [dcp §3]; a chunk's
// values are that archive's one storage record. Found through the archive's own central
// directory, read as a byte range of the data file: no tensor byte is read.
#include <cstdint>

#include "zeromount/pt/dcp_read.h"
#include "zeromount/pt/file.h"
#include "zeromount/pt/value.h"

namespace zm::pt::dcp {

// Bytes [offset, offset + length) of the data file: the chunk's elements, contiguous, in the key's
// dtype, row-major in the chunk's sizes.
struct ChunkBytes {
  uint64_t offset = 0, length = 0;
};

// Where chunk `c` of tensor key `k` keeps its values in `data_file` (the file its storage names).
// Throws FormatError naming the data file and the key when the item is not a torch.save archive
// of one contiguous tensor of the chunk's dtype and sizes, or runs past the item's range.
ChunkBytes chunk_bytes(const File& data_file, const StoredKey& k, const StoredChunk& c);

// The value a bytes item pickles (a hyper-parameter, a group's parameter names), decoded into
// `arena`, never run. Throws FormatError naming the data file and the key when the item is not a
// torch.save archive of a value without tensors.
const Node* item_value(const File& data_file, const StoredKey& k, Arena& arena);

}  // namespace zm::pt::dcp
