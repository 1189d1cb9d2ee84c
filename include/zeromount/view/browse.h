#pragma once
// Files for people and for numpy (issue 5): <T>_params/ (README, summary, <param>/info and one
// .npy per state) and <T>_fp32/model.safetensors, all served lazily from the shards.
#include <cstdint>
#include <string>

#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/universal.h"

namespace zm::view {

std::string params_readme(const std::string& tag);
// One row per parameter, aligned, with totals that equal the sums of the rows.
std::string params_summary(const ds::TagIndex& ix);
// Name, shape, dtype, group, which ranks hold which element ranges, and fp32 statistics. With
// `src` null the statistics are placeholders of the same width: the size is known without reading.
std::string param_info(const MountedTag& t, const ds::Param& p, const pt::ExtentReader* src);
// numpy .npy (format 1.0, 64-byte aligned header) of one state, for np.load(mmap_mode='r').
pt::VirtualFile param_npy(const MountedTag& t, const ds::Param& p, size_t state);
enum class Weights {
  Master,    // the optimizer's master weights (fp32), as zero_to_fp32.py writes them
  Training,  // the module's training precision (bf16/fp16): what people publish for inference
};
// Every trainable parameter in the chosen precision, frozen ones and buffers in their stored
// dtype, and shared aliases, under the names zero_to_fp32 gives them.
pt::VirtualFile model_safetensors(const MountedTag& t, Weights which);

}  // namespace zm::view
