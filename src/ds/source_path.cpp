#include "zeromount/ds/source_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "zeromount/pt/error.h"

namespace zm::ds {

namespace {

struct Fence {
  std::mutex mu;
  std::string mount;               // as the kernel names it: absolute, links resolved
  std::vector<std::string> binds;  // other mount points of the same file system (bind mounts)
  std::chrono::steady_clock::time_point read_at{};
};

Fence& fence() {
  static Fence f;
  return f;
}

bool below(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path.compare(0, dir.size(), dir) == 0 && (path.size() == dir.size() || path[dir.size()] == '/');
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\\' && k + 3 < s.size() && isdigit((unsigned char)s[k + 1])) {
      out += char(std::stoi(s.substr(k + 1, 3), nullptr, 8));
      k += 3;
    } else {
      out += s[k];
    }
  }
  return out;
}

// The mount points that show the same file system as `mount` (its device), binds included.
std::vector<std::string> binds_of(const std::string& mount) {
  std::ifstream in("/proc/self/mountinfo");
  std::vector<std::pair<std::string, std::string>> points;  // (major:minor, mount point)
  std::string dev;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, majmin, root, point;
    if (!(fields >> id >> parent >> majmin >> root >> point)) continue;
    point = unescape(point);
    if (point == mount) dev = majmin;  // the last one: a mount over it hides the ones before
    points.emplace_back(majmin, point);
  }
  std::vector<std::string> out;
  for (const auto& [majmin, point] : points)
    if (!dev.empty() && majmin == dev && point != mount) out.push_back(point);
  return out;
}

}  // namespace

void fence_mount(const std::string& mount_point) {
  Fence& f = fence();
  std::lock_guard<std::mutex> lock(f.mu);
  f.mount = mount_point;
  f.binds.clear();
  f.read_at = {};
}

bool fenced(const std::string& path) {
  Fence& f = fence();
  std::lock_guard<std::mutex> lock(f.mu);
  if (f.mount.empty()) return false;
  if (below(path, f.mount)) return true;
  // A bind of the mount made after it (mount --bind MNT X) leads into it too: mountinfo is read
  // again at most once a second, which is how often a rescan runs.
  const auto now = std::chrono::steady_clock::now();
  if (now - f.read_at > std::chrono::seconds(1)) {
    f.binds = binds_of(f.mount);
    f.read_at = now;
  }
  for (const std::string& b : f.binds)
    if (below(path, b)) return true;
  return false;
}

std::string resolve(const std::string& path) {
  constexpr int kMaxLinks = 40;  // as the kernel's MAXSYMLINKS
  if (path.empty() || path[0] != '/') throw Error(path + ": not an absolute path", EINVAL);
  std::vector<std::string> todo;  // components left, the next one last
  const auto push = [&](const std::string& p) {
    std::vector<std::string> parts;
    std::string part;
    std::istringstream in(p);
    while (std::getline(in, part, '/'))
      if (!part.empty() && part != ".") parts.push_back(part);
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  push(path);
  std::string done;  // resolved so far; "" is "/"
  int links = 0;
  while (!todo.empty()) {
    const std::string c = std::move(todo.back());
    todo.pop_back();
    if (c == "..") {
      done.resize(done.empty() ? 0 : done.rfind('/'));
      continue;
    }
    const std::string next = done + "/" + c;
    if (fenced(next)) throw Error(path + ": leads into the mount itself (" + next + "); not followed", EDEADLK);
    struct stat st {};
    if (::lstat(next.c_str(), &st) != 0) throw Error(path + ": " + std::strerror(errno), errno);
    if (!S_ISLNK(st.st_mode)) {
      done = next;
      continue;
    }
    if (++links > kMaxLinks) throw Error(path + ": cannot be followed: Too many levels of symbolic links", ELOOP);
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(next.c_str(), target.data(), target.size());
    if (n < 0) throw Error(path + ": " + std::strerror(errno), errno);
    target.resize(size_t(n));
    if (!target.empty() && target[0] == '/') done.clear();
    push(target);
  }
  if (done.empty()) done = "/";
  if (fenced(done)) throw Error(path + ": leads into the mount itself; not followed", EDEADLK);
  return done;
}

std::string file_kind_text(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

std::vector<std::string> folders_to_reach(const std::string& resolved, const std::string& root) {
  std::vector<std::string> out;
  const bool inside = !root.empty() && below(resolved, root);
  for (std::string p = resolved; p.size() > 1;) {
    p.resize(p.rfind('/'));
    if (p.empty()) p = "/";
    if (inside && p.size() < root.size()) break;
    out.push_back(p);
  }
  return {out.rbegin(), out.rend()};
}

}  // namespace zm::ds
