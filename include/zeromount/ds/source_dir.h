#pragma once
// Folders of SRC looked into by descriptor (a look by full path costs the kernel one
// step per component, so filling a folder at depth d cost O(d) per entry, and a walk of a deep
// chain O(d^2), or O(d^3) with realpath). A folder is opened once and its entries are stat'ed,
// listed, read and opened relative to it; `open_dir` finds a folder's parent among the few
// folders opened last, so opening a folder costs the same at any depth.
#include <sys/stat.h>

#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace zm::ds {

class Dir {
 public:
  struct Entry {
    std::string name;
    unsigned char type;  // readdir's d_type: DT_DIR, DT_LNK, DT_REG, ... or DT_UNKNOWN
  };

  Dir() = default;
  explicit Dir(int fd) : fd_(fd) {}
  Dir(Dir&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Dir& operator=(Dir&& o) noexcept;
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
  ~Dir();

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Its entries but `.` and `..`, in the order readdir gives them; `ec` says why it cannot be listed.
  std::vector<Entry> list(std::error_code& ec) const;
  // fstatat: the entry itself (`follow` false: a link is a link) or what it leads to.
  bool stat(const std::string& name, struct stat& st, bool follow = false) const;
  bool stat(struct stat& st) const;  // the folder itself
  // A sub-folder (a link to one is followed, as a path through it would be); !ok() and errno set if not.
  Dir open(const std::string& name) const;
  // A link's target as stored, or nothing (errno set).
  std::optional<std::string> read_link(const std::string& name) const;
  // A regular file's first `max` bytes, not following a link (nothing if it is not a regular file).
  std::optional<std::string> read_file(const std::string& name, size_t max) const;

 private:
  int fd_ = -1;
};

// `path` (absolute, no `.` or `..`) opened as a folder; !ok() with errno set when it cannot be.
// A process-wide cache keeps the 64 folders opened last (O_PATH descriptors, keyed by path): a
// folder whose parent is there is opened relative to it (openat), so its cost does not grow with
// its depth. A path is looked up whole again once the ancestors it was reached through were last
// looked up whole 100 ms ago or more (a folder renamed or replaced on the way is seen then), and a
// cached folder since deleted (no links left) is never used. At most 64 descriptors are kept,
// whatever is looked up.
Dir open_dir(const std::string& path);
inline constexpr size_t kDirsKept = 64;

// `path`'s folder and last component: "/a/b" -> ("/a", "b"), "/a" -> ("/", "a").
std::pair<std::string, std::string> split_path(const std::string& path);
// Whether `path` (absolute) is a folder (links followed), looked at relative to its parent.
bool is_folder(const std::string& path);

}  // namespace zm::ds
