#pragma once
// The files of a made-up universal checkpoint folder (spec §5.4 and §6.6), as lazily served
// .pt files: headers from the index, tensor bytes as ranges of the shards.
#include <cstdint>
#include <string>
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

// zero/<param>/<state>.pt: {'cat_dim': 0, 'param': tensor} (or a bare tensor when `bare`).
pt::VirtualFile param_state_file(const MountedTag& t, const ds::Param& p, size_t state, bool bare);
// The bytes of `p`'s state `state` (its universal tensor, cut to p.shape) appended to `f`: the
// fragments of a data-parallel checkpoint, the merge of a parallel one (extents, or computed).
void append_param_bytes(pt::VirtualFile& f, const MountedTag& t, const ds::Param& p, size_t state);
// Parallel: the merged storage of `p`'s state into `out` (data extents or a computed source).
void merged_bytes(const MountedTag& t, const ds::Param& p, size_t state, pt::Tensor& out);
// zero/<param>/<key>.pt for each per-group key (step.pt, ...): group `group`'s value of
// TagIndex::scalar_names[k], as the source optimizer stored it.
pt::VirtualFile scalar_file(const MountedTag& t, size_t group, size_t k);
// mp_rank_XX_model_states.pt of an AutoEP source (`path`, one of TagIndex::mp_files), as
// ds_to_universal.py re-saves it: the source pickle with universal_checkpoint_info's
// expert_parameter_patterns and ds_autoep_layers replaced (spec tensor-pipeline-expert.md §8).
pt::VirtualFile autoep_model_states_file(const MountedTag& t, const std::string& path);
// zero/optimizer_state.pt: what every target stage's universal loader reads, without flat tensors.
pt::VirtualFile optimizer_state_file(const MountedTag& t);

}  // namespace zm::view
