#pragma once
// DeepSpeed's training state as torch's own name-keyed state dicts hold it: what
// get_state_dict(model, optimizer) returns for the same model and torch optimizer. This says
// which parameters make each group, in which order, with which hyper-parameters, and what cannot
// be shown; the bytes are laid out by the view (view/files/dcp_files.h, torch_layouts.h).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "zeromount/ds/tag_index.h"

namespace zm::ds {

struct TorchGroup {
  // The source group's entries but 'params', in its order: lr, betas, eps, weight_decay, ...
  std::vector<std::pair<std::string, const pt::Node*>> hypers;
  std::vector<uint32_t> params;  // indices into TagIndex::params, in param_group['params'] order
};

// The param groups in DeepSpeed's order, each in the order a torch optimizer numbers its
// parameters (round robin undone). Reads the model-state file's ds_config; throws zm::Error.
std::vector<TorchGroup> torch_groups(const TagIndex& ix);

// Why this tag's state cannot be shown as torch state, or "" when it can.
std::string torch_state_refusal(const TagIndex& ix);

}  // namespace zm::ds
