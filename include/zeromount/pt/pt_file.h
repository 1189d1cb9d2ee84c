#pragma once
// One torch.save file, opened for its structure: the zip directory and the decoded data.pkl.
// Tensor bytes are never read; every tensor knows its byte range in the file instead.
#include <cstdint>
#include <memory>
#include <string>

#include "zeromount/pt/file.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/value.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::pt {

struct PtFile {
  File file;
  Arena arena;
  const Node* root = nullptr;
  std::string prefix;          // the archive's top-level folder name
  uint64_t pickle_offset = 0;  // where data.pkl's bytes start in the file
  uint64_t pickle_size = 0;
  uint64_t pickle_hash = 0;  // XXH3 of data.pkl: the file's identity without reading tensors
  // Set by load_pt_like: root is `like`'s values, and a tensor's record is this file's only once
  // same_record says so.
  const PtFile* like = nullptr;
  std::unique_ptr<ZipReader> records;

  const std::string& path() const { return file.path(); }
  // Whether this file keeps tensor `t` (one of `like`'s values) at the same bytes as `like`: a
  // stored record of the same name and size whose data starts at the same offset. Always true
  // for a file decoded on its own.
  bool same_record(const Tensor& t) const;
};

// Opens and decodes `path`. Throws FormatError naming the file on any inconsistency.
std::unique_ptr<PtFile> load_pt(const std::string& path, const PickleLimits& limits = {});

// Opens `path` for its structure without decoding its pickle when that pickle is byte for byte
// `like`'s (the same size and XXH3-64; a ZeRO-3 rank's model file beside rank 0's, whose module
// has the same names, shapes and storage keys on every rank): the values are `like`'s, which must
// outlive the result. nullptr when the pickles differ. Throws FormatError as load_pt does.
std::unique_ptr<PtFile> load_pt_like(const std::string& path, const PtFile& like);
// XXH3-64 of a byte range: how the index cache recognises a pickle without decoding it again.
uint64_t hash_bytes(const void* data, size_t n);
// XXH3-64 of `file`'s data.pkl, as PtFile::pickle_hash: whether a file whose ctime moved still
// holds the pickle it was indexed with. Throws FormatError when it has none.
uint64_t pickle_hash(const File& file);
// XXH3-64 of bytes [offset, offset + n) of `file`, read 1 MiB at a time: two copies of a tensor
// compared without holding either.
uint64_t hash_range(const File& file, uint64_t offset, uint64_t n);

}  // namespace zm::pt
