#pragma once
// Protocol-2 pickle emitter. It memoizes exactly as CPython's Pickler does for the objects
// torch.save produces, so a simple state dict pickles to the same bytes as torch.save's.
#include <string>
#include <vector>

#include "zeromount/pt/value.h"

namespace zm::pt {

struct PickledTensors {
  std::string pickle;
  std::vector<const Tensor*> storages;  // storage key k is storages[k], in order of first appearance
};

// Every Tensor node becomes _rebuild_tensor_v2 over a storage of its own ('cpu', contiguous).
PickledTensors pickle_value(const Node* root);

}  // namespace zm::pt
