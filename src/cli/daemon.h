#pragma once
#include <functional>
#include <string>

namespace zm::cli {

// `serve` mounts, calls `mounted("")` (or `mounted(error)`) once, then serves until unmounted.
using Serve = std::function<int(const std::function<void(const std::string&)>& mounted)>;

// Runs `serve` in the background, under a small supervisor process that lazily unmounts the
// mount point if the server dies without unmounting (kill -9, OOM). libfuse's auto_unmount fails
// about 1% of the time [platform §5]; a parent that waits for its child does not race.
// Returns in the caller once the mount answers (0), or 1 with the reason on stderr.
// Logs go to `log_file` once detached (syslog when empty).
int run_in_background(const std::string& mountpoint, const Serve& serve, const std::string& log_file);

}  // namespace zm::cli
