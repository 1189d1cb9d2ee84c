#pragma once
// The model-state pickle a tag's native layouts and universal folder are made from (ds/model_file.h
// keeps its skeleton): rank 0's model-state file of a DeepSpeed source, or, for a source that has
// none (a DCP folder), the one DeepSpeed would have written for it, made up from the index.
#include <memory>
#include <string>

#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

// The DeepSpeed version whose loaders the made-up files are written for: their ds_version.
inline constexpr const char* kMadeDsVersion = "0.19.6";

// The tag's model-state pickle: decoded (DeepSpeed), or made up (DCP: see made_model_root); null
// for a source with neither (a model-only save).
std::shared_ptr<const pt::Node> model_root(const TagIndex& index);

// What a source without a model-state file gets in its place, as DeepSpeed 0.19.6's
// _common_checkpoint_state orders it [formats §3.1]: 'module' names every parameter (the
// optimizer's order), frozen parameter and buffer, each None (a target remakes 'module',
// param_shapes and frozen_param_*, ds/model_file.h); buffer_names; shared_params {}; lr_scheduler
// (scheduler_note says which); data_sampler, random_ltd None; sparse_tensor_module_names set();
// skipped_steps 0; global_steps the optimizer's step; dp_world_size the source's W; mp_world_size
// 1; checkpoint_parallel_dimensions 1 x 1; ds_config (made_ds_config); ds_version kMadeDsVersion.
// No global_samples: the loading engine takes global_steps x its train_batch_size.
const pt::Node* made_model_root(pt::Arena& a, const TagIndex& index);

// The ds_config of a made-up model-state file: {'zero_optimization': {'stage': 2}, 'bf16':
// {'enabled': <module dtype is bf16>}, 'fp16': {'enabled': <fp16>}}: the save a made-up source is
// presented as (ZeRO-2 at its W, in its module dtype), which every target's files carry verbatim.
const pt::Node* made_ds_config(pt::Arena& a, const TagIndex& index);

// What the made-up lr_scheduler is, for the layouts README: the source's own state with DeepSpeed's
// 'last_batch_iteration' added, or {'last_batch_iteration': step - 1} made from the step count.
std::string scheduler_note(const TagIndex& index);

// The ds_version the files made from `index` carry: its own, else kMadeDsVersion for a made-up
// source, else "0.0.0".
std::string written_ds_version(const TagIndex& index);

}  // namespace zm::ds
