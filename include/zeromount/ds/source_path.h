#pragma once
// Following links in SRC without ever entering the mount itself. A daemon thread that looks into
// its own mount waits on itself (a tag folder linked into MNT hung every reader, in D state), so
// every link the daemon follows is resolved here, component by component, and a path that lies in
// the fence (the daemon's mount point and any bind of it) is refused before it is touched.
#include <sys/types.h>

#include <string>
#include <vector>

namespace zm::ds {

// Process-wide: one daemon serves one mount. "" (tests, export, inspect): nothing is fenced.
void fence_mount(const std::string& mount_point);
// Whether an absolute, normalised path is the mount or lies below it (or below a bind of it).
bool fenced(const std::string& path);

// `path` (absolute) with every link resolved, as realpath(3) would, but never looking into a
// fenced path. Throws zm::Error naming `path`: EDEADLK when it leads into the mount, ELOOP after
// 40 links, or lstat's errno.
std::string resolve(const std::string& path);

// The folders a reader must search to reach `resolved` (its ancestors, nearest last): those below
// `root` when it lies below `root` (SRC's own modes are what guard it in the mount), else every
// one from "/". A file reached through a link is no more readable in the mount than this allows.
std::vector<std::string> folders_to_reach(const std::string& resolved, const std::string& root);

// What a file that is not a regular one is, for messages: "a FIFO", "a socket", "a folder", ...
std::string file_kind_text(mode_t mode);

}  // namespace zm::ds
