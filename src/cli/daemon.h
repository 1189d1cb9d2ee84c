#pragma once
#include <functional>
#include <string>

namespace zm::cli {

// `serve` mounts, calls `mounted("")` (or `mounted(error)`) once, then serves until unmounted.
using Serve = std::function<int(const std::function<void(const std::string&)>& mounted)>;

// Runs `serve` in the background, under a small supervisor process that lazily unmounts the
// mount point if the server dies without unmounting (kill -9, OOM). libfuse's auto_unmount fails
// about 1% of the time (docs/spec/platform.md §5); a parent that waits for its child does not race.
// Returns in the caller once the mount answers (0), or 1 with the reason on stderr.
// Logs go to `log_file` once detached (syslog when empty).
int run_in_background(const std::string& mountpoint, const Serve& serve, const std::string& log_file);

// Why `mountpoint` cannot take a new mount ("" when it can): not a folder, already mounted, or a
// dead mount left by a daemon that died, each with what to do.
std::string mount_point_problem(const std::string& mountpoint);

bool is_mounted(const std::string& mountpoint);

// Raises the mount's readahead (its bdi's read_ahead_kb) so that buffered reads reach the server as
// 1 MiB requests instead of 128 KiB ones (docs/spec/platform.md §2.2: +30%). Must run after the kernel's
// INIT reply, which would clamp it back. Needs root; returns false where it could not.
bool set_read_ahead(const std::string& mountpoint, unsigned kb);

}  // namespace zm::cli
