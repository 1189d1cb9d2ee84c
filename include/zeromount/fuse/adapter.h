#pragma once
// The FUSE adapter: libfuse's low-level callbacks over a View. This header does not include
// libfuse; only src/fuse/adapter.cpp does.
#include <functional>
#include <string>
#include <vector>

#include "zeromount/view/view.h"

namespace zm::fuse {

struct MountConfig {
  std::string mountpoint;
  std::string fsname;                // shown in /proc/mounts, e.g. zeromount:/data/ckpt
  std::vector<std::string> options;  // extra -o options (allow_other, ...)
  unsigned threads = 0;              // max worker threads; 0: libfuse's default
  bool debug = false;
};

// Why libfuse would refuse these -o options (its own words, on one line), or "" when it takes
// them: asked before the checkpoint is indexed, so that a typo is a usage error at once.
std::string option_problem(const std::vector<std::string>& options);

// Mounts, calls `mounted` (with an error message, empty on success) once the kernel has the mount,
// then serves until unmounted or signalled. Returns 0 on a clean unmount.
int serve(const view::View& v, const MountConfig& cfg, const std::function<void(const std::string&)>& mounted);

}  // namespace zm::fuse
