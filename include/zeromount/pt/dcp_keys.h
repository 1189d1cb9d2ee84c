#pragma once
// What a DCP key is, from its name alone [dcp §4]: a model entry, an optimizer
// state of a parameter, or a param-group hyper-parameter, in the families torch's get_state_dict
// (FSDP2, Accelerate) and torchtitan write. The planner_data path decides, not the dotted name:
// torchtitan's top-level `model.layers.0.weight` (path ('model.layers.0.weight',)) is a parameter
// named so, torch's `model.layers.0.weight` (path ('model', 'layers.0.weight')) is `layers.0.weight`.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "zeromount/pt/dcp_read.h"

namespace zm::pt::dcp {

enum class Family : uint8_t { Model, OptimizerState, ParamGroup, Other };

struct KeyRole {
  Family family = Family::Other;
  std::string param;             // Model, OptimizerState, a torchtitan ParamGroup: the parameter's fqn
  std::string name;              // OptimizerState: "exp_avg"; ParamGroup: "lr", "params"
  std::optional<int64_t> group;  // ParamGroup as torch keys it: the group's index
};

// A key without planner_data is read by torch's default names ("model.<fqn>",
// "optimizer.state.<fqn>.<k>", "optimizer.param_groups.<i>.<hyper>").
KeyRole key_role(const StoredKey& k);

// Which writer's keys one folder holds. An Accelerate/Trainer checkpoint is two folders, its
// model (ModelOnly) and its optimizer (OptimizerOnly); pairing them by folder name is not a
// question about keys.
enum class Style : uint8_t { Fsdp2, Torchtitan, ModelOnly, OptimizerOnly, Unknown };
Style style_of(const ReadMetadata& md);
std::string_view style_name(Style s);

}  // namespace zm::pt::dcp
