#pragma once
// layouts/fsdp-dp<W>/ and layouts/torch/: a checkpoint folder as the Hugging Face
// Trainer saves one without DeepSpeed, under FSDP at W ranks (Accelerate's pytorch_model_fsdp_0/
// and optimizer_0/, each a DCP folder) or with neither (model.safetensors and optimizer.pt), for
// the tag the folder's `latest` names. The folder's other real files sit beside them.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/mounted_tag.h"
#include "zeromount/view/tree.h"

namespace zm::view {

class DcpPlans;  // files/dcp_files.h

struct TorchLayout {
  int fsdp_world = 0;  // fsdp-dp<W>: W (1..65536); 0: torch
};
// "fsdp-dp<W>" (W without leading zeros) or "torch"; nullopt for any other name.
std::optional<TorchLayout> parse_torch_layout(std::string_view name);

// Makes the layout's own entries in `dir` for tag `t`; its DCP folders' plans are kept in `plans`.
void add_torch_layout(Tree& tree, uint64_t dir, const MountedTag& t, TorchLayout layout, uint64_t max_shard_bytes,
                      const std::shared_ptr<const DcpPlans>& plans, struct timespec mtime);
// Whether a real entry of the checkpoint folder belongs beside them: not DeepSpeed's own
// (`latest`, zero_to_fp32.py) and not a name the layout makes.
bool torch_layout_keeps(const Inode& real);

// optimizer.pt: the torch optimizer's state_dict(), index-keyed in DeepSpeed's group order (the
// Trainer's own order): {'state': {i: {'step', 'exp_avg', ...}}, 'param_groups': [{..., 'params'}]}.
pt::VirtualFile torch_optimizer_file(const MountedTag& t);

}  // namespace zm::view
