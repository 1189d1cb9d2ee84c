#pragma once
// A pickle machine for protocols 0-5 that builds a value tree and never runs anything:
// GLOBAL names a class, REDUCE/NEWOBJ record a call, and only torch's tensor rebuild functions
// and a few containers (OrderedDict, torch.Size, set, bytes) are interpreted.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "zeromount/pt/value.h"

namespace zm::pt {

struct PickleLimits {
  size_t max_stack = 1u << 22;  // stack + mark-stack entries
  size_t max_memo = 1u << 24;   // memo entries
  size_t max_nodes = 1u << 26;  // nodes built
};

// Called for each storage persistent id: returns the record's data offset in the file,
// after checking that the record holds `nbytes` bytes. Throws FormatError otherwise.
using StorageResolver = std::function<uint64_t(const std::string& key, uint64_t nbytes)>;

// Decodes `bytes` into `arena`. `file` names the source in every error message.
const Node* decode_pickle(std::string_view bytes, Arena& arena, const std::string& file, const StorageResolver& resolve,
                          const PickleLimits& limits = {});

}  // namespace zm::pt
