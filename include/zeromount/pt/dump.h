#pragma once
// Looking inside a .pt file: a readable tree, and a JSON manifest that tests compare with what
// Python torch reports for the same file.
#include <string>
#include <string_view>

#include "zeromount/pt/pt_file.h"

namespace zm::pt {

// Indented tree with tensor metadata (dtype, shape, byte range), like DeepSpeed's structure dumps.
std::string dump_tree(const PtFile& f);
// {"prefix":..., "tree": value}; tensors carry dtype, shape, stride, offset and the CRC-32 of their bytes.
std::string dump_json(const PtFile& f);

}  // namespace zm::pt
