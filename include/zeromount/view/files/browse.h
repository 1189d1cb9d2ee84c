#pragma once
// Files for people and for numpy: <T>_params/ (README, summary, <param>/info and one .npy per
// state), all served lazily from the shards.
#include <cstdint>
#include <string>

#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

// `report`: the folder holds report.html (no -o report=off).
std::string params_readme(const std::string& tag, bool report);
// One row per parameter, aligned, with totals that equal the sums of the rows.
std::string params_summary(const ds::TagIndex& ix);
// Name, shape, dtype, group, which ranks hold which element ranges, and fp32 statistics. With
// `src` null the statistics are placeholders of the same width: the size is known without reading.
std::string param_info(const MountedTag& t, const ds::Param& p, const pt::ExtentReader* src);
// numpy .npy (format 1.0, 64-byte aligned header) of one state, for np.load(mmap_mode='r').
pt::VirtualFile param_npy(const MountedTag& t, const ds::Param& p, size_t state);
}  // namespace zm::view
