#pragma once
// One torch.save file, opened for its structure: the zip directory and the decoded data.pkl.
// Tensor bytes are never read; every tensor knows its byte range in the file instead.
#include <cstdint>
#include <memory>
#include <string>

#include "zeromount/pt/file.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/value.h"

namespace zm::pt {

struct PtFile {
  File file;
  Arena arena;
  const Node* root = nullptr;
  std::string prefix;          // the archive's top-level folder name
  uint64_t pickle_offset = 0;  // where data.pkl's bytes start in the file
  uint64_t pickle_size = 0;
  uint64_t pickle_hash = 0;  // XXH3 of data.pkl: the file's identity without reading tensors

  const std::string& path() const { return file.path(); }
};

// Opens and decodes `path`. Throws FormatError naming the file on any inconsistency.
std::unique_ptr<PtFile> load_pt(const std::string& path, const PickleLimits& limits = {});

// XXH3-64 of a byte range: how the index cache recognises a pickle without decoding it again.
uint64_t hash_bytes(const void* data, size_t n);
// XXH3-64 of bytes [offset, offset + n) of `file`, read 1 MiB at a time: two copies of a tensor
// compared without holding either.
uint64_t hash_range(const File& file, uint64_t offset, uint64_t n);

}  // namespace zm::pt
