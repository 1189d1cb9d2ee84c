#pragma once
// The files of a made-up universal checkpoint folder [formats §5.4, §6.6], as lazily served
// .pt files: DeepSpeed's pickles (ds/universal_file.h, ds/autoep_model_file.h) under the names
// torch.save gives their archives, tensor bytes as ranges of the shards.
#include <cstddef>
#include <string>

#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

// zero/<param>/<state>.pt: {'cat_dim': 0, 'param': tensor} (or a bare tensor when `bare`).
pt::VirtualFile param_state_file(const MountedTag& t, const ds::Param& p, size_t state, bool bare);
// zero/<param>/<key>.pt for each per-group key (step.pt, ...): group `group`'s value of
// TagIndex::scalar_names[k], as the source optimizer stored it.
pt::VirtualFile scalar_file(const MountedTag& t, size_t group, size_t k);
// mp_rank_XX_model_states.pt of an AutoEP source (`path`, one of TagIndex::mp_files), as
// ds_to_universal.py re-saves it: the source pickle with universal_checkpoint_info's
// expert_parameter_patterns and ds_autoep_layers replaced [tp §8].
pt::VirtualFile autoep_model_states_file(const MountedTag& t, const std::string& path);
// The model-state file of a source that has none (a DCP folder), under every name of both families:
// the one layouts/<made_model_states_layout>/ holds (ZeRO-2 at the source's W, in its module
// dtype), made from ds/model_root.h's made-up pickle. A universal load reads only its
// global_steps, lr_scheduler, dp_world_size and the like; its 'module' is never loaded.
ds::TargetLayout made_model_states_layout(const ds::TagIndex& ix);
pt::VirtualFile made_model_states_file(const MountedTag& t);
// zero/optimizer_state.pt: what every target stage's universal loader reads, without flat tensors.
pt::VirtualFile optimizer_state_file(const MountedTag& t);

}  // namespace zm::view
