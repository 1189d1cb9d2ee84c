// Making a real folder's entries on its first use (docs/ARCHITECTURE.md, `view`): its real
// entries, the index of the tags it holds, and every provider's entries beside them. A folder of
// any depth that holds tag folders is a checkpoint folder (SRC, a Trainer's checkpoint-N/, an
// Accelerate checkpoint_N/): it gets the same made-up entries SRC gets.
#include <linux/limits.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>

#include "checkpoint_folder.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/source_path.h"
#include "zeromount/pt/error.h"

namespace zm::view {

namespace fs = std::filesystem;

RealListing list_real(const std::string& dir, const std::string& skip) {
  RealListing out;
  if (dir == skip) return out;
  out.dir = ds::open_dir(dir);
  std::error_code ec;
  if (!out.dir.ok()) ec = std::error_code(errno, std::generic_category());
  for (ds::Dir::Entry& d : out.dir.ok() ? out.dir.list(ec) : std::vector<ds::Dir::Entry>{}) {
    RealEntry e{std::move(d.name), ""};
    e.path = dir + "/" + e.name;
    if (e.path == skip) continue;  // our own mount
    // The view names real entries by path (the index, the file table, errors): a path the kernel
    // would refuse (ENAMETOOLONG) could be listed through descriptors but never read. Not shown.
    if (e.path.size() >= PATH_MAX) {
      spdlog::warn("{}/{}: not shown: its path is longer than PATH_MAX ({} bytes)", dir, e.name, e.path.size());
      continue;
    }
    if (!out.dir.stat(e.name, e.st)) continue;  // gone since listed
    out.entries.push_back(std::move(e));
  }
  if (ec)  // shown as the kernel would: the folder with its own mode, which says who may list it
    spdlog::warn("{}: cannot list ({}); shown empty", dir, ec.message());
  std::sort(out.entries.begin(), out.entries.end(),
            [](const RealEntry& a, const RealEntry& b) { return a.name < b.name; });
  return out;
}

bool View::holds_checkpoint_folders(const std::string& dir) const {
  if (dir == opts_.mount_point) return false;
  const std::string& skip = opts_.mount_point;
  return ds::any_folder_in({dir, ds::open_dir(dir)}, skip,
                           [&](const ds::OpenFolder& d) { return ds::holds_tag_folder(d, skip); });
}

void View::mirror(const Folder* f, const std::string& real_dir, uint64_t dir) const {
  Folder::mirror(*this, f, list_real(real_dir, opts_.mount_point), dir);
}

void View::fill(const Inode& node, const ds::CheckpointDir* scanned) const {
  if (!node.is_dir() || node.folder().filled.load()) return;
  const FolderData& dir = node.folder();
  Growth& g = *growth_;
  std::lock_guard<std::mutex> filling(g.fill_mu);
  if (dir.filled.load()) return;
  if (dir.plain || (!opts_.tags.empty() && node.ino != Tree::kRoot)) {  // --tag serves SRC's own tags only
    tree_.append([&](Tree& tree) {
      mirror(nullptr, dir.real, node.ino);
      tree.set_filled(node.ino);
    });
    return;
  }
  const Folder* above = node.ino == Tree::kRoot ? nullptr : folder_of(*tree_.get(node.parent));
  auto made = std::make_unique<Folder>(
      *this, node.ino, dir.real, node.ino == Tree::kRoot ? "" : describe(node).substr(1), above ? above->node : 0);
  Folder& f = *made;
  ds::CheckpointDir scan;
  try {
    if (scanned)
      scan = *scanned;
    else if (dir.real != opts_.mount_point)
      scan = ds::scan_folder(dir.real, opts_.mount_point);  // a folder of the tree: its path is resolved
  } catch (const Error& e) {
    spdlog::warn("{}: {}", dir.real, e.what());
  }
  if (node.ino == Tree::kRoot && scan.root_is_tag)  // a tag folder mounted alone: a folder holding that tag
    f.own_tag = fs::path(dir.real).filename().string();
  const auto scanning = f.hold_scans();  // what is indexed now is appended under scan_mu
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.folders.emplace(f.node, std::move(made));
    g.order.push_back(&f);
  }
  f.fill(scan);
}

}  // namespace zm::view
