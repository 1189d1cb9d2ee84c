#pragma once
// Reading a safetensors file's header (and a sharded folder's index) for checks: the JSON is parsed
// by nlohmann::json (bounded in size: the safetensors crate's 100 MB), so that a damaged header is
// refused by name, never trusted.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "zeromount/pt/dtype.h"
#include "zeromount/pt/file.h"

namespace zm::pt::st {

// One tensor: its bytes are [begin, end) of the file (data_offsets plus the header's end).
struct Entry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::string path;
  uint64_t data_start = 0;     // 8 + the header's length
  std::vector<Entry> tensors;  // in the order of their offsets
};

// The dtype a safetensors name ("F32", "BF16", "BOOL") stands for; throws for any other.
DType dtype_named(const std::string& name, const std::string& where);

// Reads and checks the header of `f`. Throws FormatError naming the file (and the key) when the
// length runs past the file, the JSON is not an object of tensors, a dtype is unknown, a
// tensor's bytes are not its shape times its element size, or the tensors do not tile the data
// area exactly (a gap, an overlap, bytes past the last tensor, a file cut short).
Header read_header(const File& f);

// model.safetensors.index.json's weight_map: (tensor name, shard file name) in file order.
// `path` names the index in errors.
std::vector<std::pair<std::string, std::string>> read_index(const std::string& text, const std::string& path);

}  // namespace zm::pt::st
