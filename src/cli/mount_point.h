#pragma once
// Where a mount goes, and whether it may go there: every check runs before anything is indexed
// or forked, so that a mistake leaves nothing behind.
#include <string>

namespace zm::cli {

// `mountpoint` as the kernel and /proc/self/mountinfo name it: absolute, links resolved. A dead
// mount cannot be resolved itself (its stat fails with ENOTCONN), so its parent is, and its name
// is appended; a path whose parent does not exist either is returned absolute and normalized.
std::string resolve_mount_point(const std::string& mountpoint);

// Whether `path` is `folder` or lies below it; both absolute, links resolved.
bool inside(const std::string& path, const std::string& folder);

// Why `mountpoint` (resolved) cannot take a new mount ("" when it can): missing, not a folder,
// already mounted, or a dead mount left by a daemon that died, each with what to do.
std::string mount_point_problem(const std::string& mountpoint);

// Why SRC cannot be mounted on `mountpoint` (both resolved; "" when it can): the same folder, or
// one inside the other. The server reads SRC by path while it serves, so each of these would send
// its own reads back to itself, and the first listing would hang for good.
std::string overlap_problem(const std::string& source, const std::string& mountpoint);

// The number of entries a mount on `mountpoint` would hide (0 when it cannot be listed).
size_t hidden_entries(const std::string& mountpoint);

bool is_mounted(const std::string& mountpoint);

// Raises the mount's readahead (its bdi's read_ahead_kb) so that buffered reads reach the server as
// 1 MiB requests instead of 128 KiB ones (+30% [platform §2.2]). Must run after the kernel's
// INIT reply, which would clamp it back. Needs root; returns false where it could not.
bool set_read_ahead(const std::string& mountpoint, unsigned kb);

}  // namespace zm::cli
