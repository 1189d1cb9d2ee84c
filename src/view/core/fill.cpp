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

#include "growth.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/source_path.h"
#include "zeromount/pt/error.h"

namespace zm::view {

namespace fs = std::filesystem;

namespace {}  // namespace

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

namespace {

// Whether the real folder `real` was made after the mount (`loaded_at`, 0 while loading): a
// Trainer's checkpoint-N/ saved into a mounted run folder, whose tags count as saved after the mount.
bool made_after_mount(const std::string& real, struct timespec loaded_at) {
  struct stat st {};
  if (loaded_at.tv_sec == 0 || !ds::open_dir(real).stat(st)) return false;
  return st.st_ctim.tv_sec > loaded_at.tv_sec ||
         (st.st_ctim.tv_sec == loaded_at.tv_sec && st.st_ctim.tv_nsec > loaded_at.tv_nsec);
}

}  // namespace

uint64_t View::Folder::add_latest(Tree& tree, struct timespec mtime) const {
  return add_live_text(
      tree, node, "latest", [this] { return latest_text(); }, mtime);
}

bool View::holds_checkpoint_folders(const std::string& dir) const {
  if (dir == opts_.mount_point) return false;
  const std::string& skip = opts_.mount_point;
  return ds::any_folder_in({dir, ds::open_dir(dir)}, skip,
                           [&](const ds::OpenFolder& d) { return ds::holds_tag_folder(d, skip); });
}

bool View::Folder::new_run_folder() const {
  // Only the report pages are made up in run folders: without them, no folder is looked into.
  const ViewOptions& o = view.opts_;
  return !run && !built && tags.empty() && o.report && o.tags.empty() && own_tag.empty() &&
         view.holds_checkpoint_folders(real);
}

void View::Folder::add_run(Tree& tree) const {
  run = true;
  ProviderContext cx = context(tree, true);
  for (const auto& p : providers()) p->add_run(cx);
}

ProviderContext View::Folder::context(Tree& tree, bool building) const {
  return ProviderContext(tree, view.files_, view.opts_, view, *this, view.dcp_plans_, building);
}

void View::mirror(const Folder* f, const std::string& real_dir, uint64_t dir) const {
  Folder::mirror(*this, f, list_real(real_dir, opts_.mount_point), dir);
}

void View::Folder::mirror(const View& view, const Folder* f, const RealListing& listing, uint64_t dir) {
  Tree& tree = view.tree_;  // under Tree::append
  for (const RealEntry& e : listing.entries) {
    if (tree.lookup(dir, e.name)) continue;  // shown before: a name keeps its meaning
    const struct stat& st = e.st;
    try {
      if (S_ISLNK(st.st_mode)) {
        // Links stay links (dangling ones and loops included): readlink gives the stored target.
        const std::optional<std::string> target = listing.dir.read_link(e.name);
        if (!target) continue;
        tree.set_access(tree.add_link(dir, e.name, st.st_mtim, *target), access_of(st));
      } else if (S_ISDIR(st.st_mode)) {
        // Tag folders show their real files only; other folders may hold checkpoints of their own.
        const bool plain = !f || f->is_tag(e.name);
        tree.set_access(tree.add_real_dir(dir, e.name, st.st_mtim, e.path, plain), access_of(st));
      } else if (S_ISREG(st.st_mode) && f && e.name == "latest" && st.st_size <= ds::kLatestMaxBytes) {
        // DeepSpeed rewrites `latest` in place after every save: a live file, so that a rewrite
        // (or a touch) never makes it ESTALE, and it always names a tag the view serves.
        tree.set_access(f->add_latest(tree, st.st_mtim), access_of(st));
        view.real_bytes_ += uint64_t(st.st_size);
      } else if (S_ISREG(st.st_mode)) {
        const uint64_t ino = add_real_file(tree, view.files_, dir, e.name, e.path);
        view.real_bytes_ += uint64_t(st.st_size);
        if (f && f->built)  // after the made-up folders: those that carry such files get it too
          for (const auto& p : providers()) p->add_real(tree, *f, *tree.get(ino));
      } else {  // a read-only view of files serves no FIFO, socket or device: say so once
        spdlog::info("{}: not shown: {}", e.path, ds::file_kind_text(st.st_mode));
      }
    } catch (const Error& err) {
      spdlog::warn("{}: not shown: {}", e.path, err.what());
    }
  }
}

const MountedTag& View::Folder::add_tag(const std::string& tag, bool* cache_hit) const {
  FileTable& files = view.files_;
  const std::string td = own_tag.empty() ? real + "/" + tag : real;
  auto ix = ds::index_tag_cached(td, cache_hit, view.opts_.tp_strict);
  ix->tag = tag;  // a linked tag is named by its link, not its target
  auto mt = std::make_unique<MountedTag>();
  mt->index = ix.get();
  mt->crc_source = view.opts_.crc ? &files : nullptr;
  // What a made-up entry may be: what its sources allow, and (for those reached through a link)
  // what the folders on the way to them allow, as the kernel would ask of a reader following the
  // link (a shard linked into a 0700 folder stays closed to others: issue 27).
  std::map<std::string, Access> searched;  // folder -> its search bits, as read bits
  const auto reach = [&](const std::string& path, std::vector<Access>& into) {
    for (const std::string& d : ds::folders_to_reach(path, view.root_)) {
      auto [at, fresh] = searched.try_emplace(d);
      if (fresh) {
        struct stat st {};
        at->second = ::stat(d.c_str(), &st) == 0 ? access_of(st) : Access{0, 0, 0, true};
        at->second.perm = (at->second.perm & 0111) | (at->second.perm & 0111) << 2;
      }
      into.push_back(at->second);
    }
  };
  std::vector<Access> shard_access, folder_access;
  for (const auto& s : ix->shards) {
    const uint32_t id = files.add(s.path);
    files.expect(id, s.size, s.mtime_ns, s.inode, s.pickle_hash);
    mt->file_of_shard.push_back(id);
    shard_access.push_back(access_of(files.stat(id)));
    reach(s.path, shard_access);
  }
  struct stat tag_st {};
  ::stat(ix->dir.c_str(), &tag_st);
  folder_access.push_back(access_of(tag_st));
  reach(ix->dir, folder_access);
  mt->folder = least_of(folder_access);
  mt->files = least_of(shard_access);
  const MountedTag& t = *mt;
  indexes.push_back(std::move(ix));
  tags.push_back(std::move(mt));
  serve(tag);
  return t;
}

bool View::Folder::index_new_tags(const std::vector<std::string>& names, bool after_mount) const {
  const ViewOptions& o = view.opts_;
  bool added = false;
  for (const auto& tag : names) {
    {
      std::lock_guard<std::mutex> lock(mu);
      known.insert(tag);
      if (served.count(tag) || lost.count(tag)) continue;
    }
    if (!o.tags.empty() && std::find(o.tags.begin(), o.tags.end(), tag) == o.tags.end()) continue;
    const std::string td = own_tag.empty() ? real + "/" + tag : real;
    std::string fp = fingerprint(td);
    if (auto it = attempts_.find(tag); it != attempts_.end() && it->second == fp) continue;
    // One tag that cannot be indexed (a save in progress, a truncated rank) never takes the rest of
    // the folder down: it is shown as its real files only, and the reason is logged and kept in
    // .zeromount/errors. A tag named with --tag must index.
    try {
      bool hit = false;
      const MountedTag& t = add_tag(tag, &hit);
      Growth& g = *view.growth_;
      std::lock_guard<std::mutex> lock(g.mu);
      g.cache_hits += hit;
      if (after_mount) {
        ++g.tags_after_mount;
        spdlog::info("{}: indexed after the mount, now served ({} parameters)", inside(tag), t.index->params.size());
      }
      added = true;
    } catch (const Error& e) {
      if (!o.tags.empty()) throw;
      if (after_mount)  // most often a save still in progress: tried again once the folder changes
        spdlog::info("{}: not served yet: {}", inside(tag), e.what());
      else
        spdlog::error("{}: not served: {}", inside(tag), e.what());
      refuse(tag, e.what(), std::move(fp));
    }
  }
  return added;
}

void View::Folder::show_tags(const std::vector<const MountedTag*>& added) const {
  if (added.empty()) return;
  view.tree_.append([&](Tree& tree) {
    // A tag saved since the last scan: refresh has just mirrored its folder. One refused before
    // (a plain real folder) may have gained files since.
    for (const MountedTag* t : added) {
      const Inode* had = tree.lookup(node, t->index->tag);
      if (had && had->is_dir() && had->folder().plain) {
        if (had->folder().filled) view.mirror(nullptr, had->folder().real, had->ino);
        tree.set_growing(had->ino, false);
      }
    }
    if (!tree.lookup(node, "latest") && ds::read_latest(real))  // the first save into an empty folder
      add_latest(tree, tree.get(node)->mtime);
    follow_latest();
    ProviderContext cx = context(tree, !built);
    for (const auto& p : providers()) {
      for (const MountedTag* t : added) p->add_tag(cx, *t);
      if (!built) p->add_folder(cx, added);
    }
    built = true;
  });
}

void View::Folder::show_partial_tags(const std::vector<std::string>& names) const {
  Tree& tree = view.tree_;  // under Tree::append
  const bool growing = view.opts_.rescan_seconds > 0 && view.opts_.tags.empty() && own_tag.empty();
  for (const auto& tag : names)
    if (const Inode* d = tree.lookup(node, tag); d && d->is_dir() && d->folder().plain && !is_served(tag)) {
      if (d->folder().filled)
        view.mirror(nullptr, d->folder().real, d->ino);  // a save in progress: its files may still arrive
      tree.set_growing(d->ino, growing);
    }
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
  std::lock_guard<std::mutex> scanning(f.scan_mu);  // what is indexed now is appended under scan_mu
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.folders.emplace(f.node, std::move(made));
    g.order.push_back(&f);
  }
  f.fill(scan);
}

void View::Folder::fill(const ds::CheckpointDir& scan) const {
  const ViewOptions& o = view.opts_;
  for (const auto& [name, why] : scan.refused) {
    spdlog::warn("{}", why);
    refuse_entry(name, why);
  }
  const std::vector<std::string> names = own_tag.empty() ? scan.tags : std::vector<std::string>{own_tag};
  index_new_tags(names, made_after_mount(real, view.growth_->loaded_at));
  last_scan_ = Clock::now();
  take_latest(own_tag.empty() ? ds::read_latest(real) : std::optional(own_tag));
  const bool growing = o.rescan_seconds > 0 && o.tags.empty() && own_tag.empty();
  const bool runs = new_run_folder();
  view.tree_.append([&](Tree& tree) {
    if (!own_tag.empty()) {
      struct stat st {};
      ::stat(real.c_str(), &st);
      tree.set_access(tree.add_real_dir(node, own_tag, st.st_mtim, real, true), access_of(st));
      Access text = access_of(st);
      text.perm &= 0444;
      tree.set_access(add_text(tree, node, "latest", own_tag, st.st_mtim), text);
    } else {
      view.mirror(this, real, node);
    }
    tree.set_growing(node, growing);
    std::vector<const MountedTag*> shown;
    for (const auto& t : tags) shown.push_back(t.get());
    show_partial_tags(names);
    ProviderContext cx = context(tree, true);
    for (const auto& p : providers()) {
      for (const MountedTag* t : shown) p->add_tag(cx, *t);
      if (!shown.empty()) p->add_folder(cx, shown);
      if (node == Tree::kRoot) p->add_mount(tree, view);
    }
    built = !shown.empty();
    if (runs) add_run(tree);
    tree.set_filled(node);
  });
}

}  // namespace zm::view
