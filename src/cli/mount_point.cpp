#include "mount_point.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zm::cli {

namespace fs = std::filesystem;

namespace {

// /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string o;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\\' && k + 3 < s.size()) {
      o.push_back(char((s[k + 1] - '0') * 64 + (s[k + 2] - '0') * 8 + (s[k + 3] - '0')));
      k += 3;
    } else {
      o.push_back(s[k]);
    }
  }
  return o;
}

// The "major:minor" of the mount at `mountpoint`, or "" when nothing is mounted there.
std::string mount_device(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    if (unescape(point) == mountpoint) return dev;
  }
  return "";
}

std::string dead_mount(const std::string& mountpoint) {
  return mountpoint + ": a dead mount is left there (its daemon died): run `fusermount3 -u -z " + mountpoint +
         "` (or `umount -l` as root), then mount again";
}

}  // namespace

std::string resolve_mount_point(const std::string& mountpoint) {
  std::error_code ec;
  if (const fs::path p = fs::canonical(mountpoint, ec); !ec) return p.string();
  fs::path abs = fs::absolute(mountpoint, ec).lexically_normal();
  if (!abs.has_filename()) abs = abs.parent_path();  // "mnt/"
  const fs::path parent = fs::canonical(abs.parent_path(), ec);
  return ec ? abs.string() : (parent / abs.filename()).string();
}

bool inside(const std::string& path, const std::string& folder) {
  if (folder == "/") return true;
  return path.compare(0, folder.size(), folder) == 0 && (path.size() == folder.size() || path[folder.size()] == '/');
}

std::string mount_point_problem(const std::string& mountpoint) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    const int e = errno;
    return e == ENOTCONN ? dead_mount(mountpoint) : mountpoint + ": mount point: " + strerror(e);
  }
  if (!S_ISDIR(st.st_mode)) return mountpoint + ": mount point is not a folder";
  if (!is_mounted(mountpoint)) return "";
  // statfs always reaches the daemon, where stat may be answered from the kernel's cache.
  struct statvfs sv;
  if (::statvfs(mountpoint.c_str(), &sv) != 0 && errno == ENOTCONN) return dead_mount(mountpoint);
  return mountpoint + ": already mounted; unmount it first (`fusermount3 -u " + mountpoint +
         "`): a mount on top would hide it";
}

std::string overlap_problem(const std::string& source, const std::string& mountpoint) {
  if (source == mountpoint)
    return mountpoint +
           ": the mount point is SRC itself: the mount would hide the checkpoint it serves; mount it on "
           "another folder";
  if (inside(mountpoint, source))
    return mountpoint + ": the mount point is inside SRC (" + source +
           "): the view would contain itself; mount it outside SRC";
  if (inside(source, mountpoint))
    return source + ": SRC is inside the mount point (" + mountpoint +
           "): the mount would hide it from its own server; mount it on a folder that does not hold SRC";
  return "";
}

size_t hidden_entries(const std::string& mountpoint) {
  DIR* d = ::opendir(mountpoint.c_str());
  if (!d) return 0;
  size_t n = 0;
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  ::closedir(d);
  return n;
}

bool is_mounted(const std::string& mountpoint) {
  return !mount_device(mountpoint).empty();
}

bool set_read_ahead(const std::string& mountpoint, unsigned kb) {
  const std::string dev = mount_device(mountpoint);
  if (dev.empty()) return false;
  std::ofstream ra("/sys/class/bdi/" + dev + "/read_ahead_kb");
  ra << kb << "\n";
  ra.flush();
  return bool(ra);
}

}  // namespace zm::cli
