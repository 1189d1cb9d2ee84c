// Making a real folder's entries on its first use (docs/ARCHITECTURE.md, "Folders"): its real
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
#include "zeromount/pt/text.h"

namespace zm::view {

namespace fs = std::filesystem;

namespace {

struct RealEntry {
  std::string name, path;
  struct stat st {};
};

// A real folder's entries, sorted by name, and the folder opened: every look at an entry is
// relative to it, so a folder costs the same at any depth (issue 27). `skip` (the mount point) is
// never looked into.
struct RealListing {
  ds::Dir dir;
  std::vector<RealEntry> entries;
};

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

// Whether the real folder `real` was made after the mount (`loaded_at`, 0 while loading): a
// Trainer's checkpoint-N/ saved into a mounted run folder, whose tags count as saved after the mount.
bool made_after_mount(const std::string& real, struct timespec loaded_at) {
  struct stat st {};
  if (loaded_at.tv_sec == 0 || !ds::open_dir(real).stat(st)) return false;
  return st.st_ctim.tv_sec > loaded_at.tv_sec ||
         (st.st_ctim.tv_sec == loaded_at.tv_sec && st.st_ctim.tv_nsec > loaded_at.tv_nsec);
}

}  // namespace

uint64_t View::add_latest(Tree& tree, const Folder& f, struct timespec mtime) const {
  const Folder* folder = &f;
  return add_live_text(
      tree, f.node, "latest", [folder] { return folder->latest_text(); }, mtime);
}

bool View::holds_checkpoint_folders(const std::string& dir) const {
  if (dir == opts_.mount_point) return false;
  const std::string& skip = opts_.mount_point;
  return ds::any_folder_in({dir, ds::open_dir(dir)}, skip,
                           [&](const ds::OpenFolder& d) { return ds::holds_tag_folder(d, skip); });
}

bool View::new_run_folder(const Folder& f) const {
  // Only the report pages are made up in run folders: without them, no folder is looked into.
  return !f.run && !f.built && f.tags.empty() && opts_.report && opts_.tags.empty() && f.own_tag.empty() &&
         holds_checkpoint_folders(f.real);
}

void View::add_run(Tree& tree, Folder& f) const {
  f.run = true;
  ProviderContext cx = context(tree, f, true);
  for (const auto& p : providers()) p->add_run(cx);
}

ProviderContext View::context(Tree& tree, const Folder& f, bool building) const {
  return ProviderContext(tree, files_, opts_, *this, f, building);
}

void View::mirror(const Folder* f, const std::string& real_dir, uint64_t dir) const {
  Tree& tree = tree_;  // under Tree::append
  const RealListing listing = list_real(real_dir, opts_.mount_point);
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
        tree.set_access(add_latest(tree, *f, st.st_mtim), access_of(st));
        real_bytes_ += uint64_t(st.st_size);
      } else if (S_ISREG(st.st_mode)) {
        const uint64_t ino = add_real_file(tree, files_, dir, e.name, e.path);
        real_bytes_ += uint64_t(st.st_size);
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

const MountedTag& View::add_tag(Folder& f, const std::string& tag, bool* cache_hit) const {
  const std::string td = f.own_tag.empty() ? f.real + "/" + tag : f.real;
  auto ix = ds::index_tag_cached(td, cache_hit, opts_.tp_strict);
  ix->tag = tag;  // a linked tag is named by its link, not its target
  auto mt = std::make_unique<MountedTag>();
  mt->index = ix.get();
  mt->crc_source = opts_.crc ? &files_ : nullptr;
  // What a made-up entry may be: what its sources allow, and (for those reached through a link)
  // what the folders on the way to them allow, as the kernel would ask of a reader following the
  // link (a shard linked into a 0700 folder stays closed to others: issue 27).
  std::map<std::string, Access> searched;  // folder -> its search bits, as read bits
  const auto reach = [&](const std::string& path, std::vector<Access>& into) {
    for (const std::string& d : ds::folders_to_reach(path, root_)) {
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
    const uint32_t id = files_.add(s.path);
    files_.expect(id, s.size, s.mtime_ns, s.inode);
    mt->file_of_shard.push_back(id);
    shard_access.push_back(access_of(files_.stat(id)));
    reach(s.path, shard_access);
  }
  struct stat tag_st {};
  ::stat(ix->dir.c_str(), &tag_st);
  folder_access.push_back(access_of(tag_st));
  reach(ix->dir, folder_access);
  mt->folder = least_of(folder_access);
  mt->files = least_of(shard_access);
  const MountedTag& t = *mt;
  f.indexes.push_back(std::move(ix));
  f.tags.push_back(std::move(mt));
  f.serve(tag);
  return t;
}

bool View::index_new_tags(Folder& f, const std::vector<std::string>& tags, bool after_mount) const {
  bool added = false;
  for (const auto& tag : tags) {
    {
      std::lock_guard<std::mutex> lock(f.mu);
      f.known.insert(tag);
      if (f.served.count(tag) || f.lost.count(tag)) continue;
    }
    if (!opts_.tags.empty() && std::find(opts_.tags.begin(), opts_.tags.end(), tag) == opts_.tags.end()) continue;
    const std::string td = f.own_tag.empty() ? f.real + "/" + tag : f.real;
    std::string fp = fingerprint(td);
    if (auto it = f.attempts.find(tag); it != f.attempts.end() && it->second == fp) continue;
    // One tag that cannot be indexed (a save in progress, a truncated rank) never takes the rest of
    // the folder down: it is shown as its real files only, and the reason is logged and kept in
    // .zeromount/errors. A tag named with --tag must index.
    try {
      bool hit = false;
      const MountedTag& t = add_tag(f, tag, &hit);
      std::lock_guard<std::mutex> lock(growth_->mu);
      growth_->cache_hits += hit;
      if (after_mount) {
        ++growth_->tags_after_mount;
        spdlog::info("{}: indexed after the mount, now served ({} parameters)", f.inside(tag), t.index->params.size());
      }
      added = true;
    } catch (const Error& e) {
      if (!opts_.tags.empty()) throw;
      if (after_mount)  // most often a save still in progress: tried again once the folder changes
        spdlog::info("{}: not served yet: {}", f.inside(tag), e.what());
      else
        spdlog::error("{}: not served: {}", f.inside(tag), e.what());
      f.refuse(tag, e.what(), std::move(fp));
    }
  }
  return added;
}

void View::show_tags(Folder& f, const std::vector<const MountedTag*>& tags) const {
  if (tags.empty()) return;
  tree_.append([&](Tree& tree) {
    // A tag saved since the last scan: refresh has just mirrored its folder. One refused before
    // (a plain real folder) may have gained files since.
    for (const MountedTag* t : tags) {
      const Inode* had = tree.lookup(f.node, t->index->tag);
      if (had && had->is_dir() && had->folder().plain) {
        if (had->folder().filled) mirror(nullptr, had->folder().real, had->ino);
        tree.set_growing(had->ino, false);
      }
    }
    if (!tree.lookup(f.node, "latest") && ds::read_latest(f.real))  // the first save into an empty folder
      add_latest(tree, f, tree.get(f.node)->mtime);
    follow_latest(f);
    ProviderContext cx = context(tree, f, !f.built);
    for (const auto& p : providers()) {
      for (const MountedTag* t : tags) p->add_tag(cx, *t);
      if (!f.built) p->add_folder(cx, tags);
    }
    f.built = true;
  });
}

void View::show_partial_tags(const Folder& f, const std::vector<std::string>& tags) const {
  Tree& tree = tree_;  // under Tree::append
  const bool growing = opts_.rescan_seconds > 0 && opts_.tags.empty() && f.own_tag.empty();
  for (const auto& tag : tags)
    if (const Inode* d = tree.lookup(f.node, tag); d && d->is_dir() && d->folder().plain && !f.is_served(tag)) {
      if (d->folder().filled)
        mirror(nullptr, d->folder().real, d->ino);  // a save in progress: its files may still arrive
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
  auto made = std::make_unique<Folder>();
  Folder& f = *made;
  f.view = this;
  f.node = node.ino;
  f.real = dir.real;
  f.rel = node.ino == Tree::kRoot ? "" : describe(node).substr(1);
  if (const Folder* above = node.ino == Tree::kRoot ? nullptr : folder_of(*tree_.get(node.parent)))
    f.parent = above->node;
  ds::CheckpointDir scan;
  try {
    if (scanned)
      scan = *scanned;
    else if (dir.real != opts_.mount_point)
      scan = ds::scan_folder(dir.real, opts_.mount_point);  // a folder of the tree: its path is resolved
  } catch (const Error& e) {
    spdlog::warn("{}: {}", dir.real, e.what());
  }
  for (const auto& [name, why] : scan.refused) {
    spdlog::warn("{}", why);
    f.refuse_entry(name, why);
  }
  std::vector<std::string> tags = scan.tags;
  if (node.ino == Tree::kRoot && scan.root_is_tag) {  // a tag folder mounted alone: a folder holding that tag
    f.own_tag = fs::path(dir.real).filename().string();
    tags = {f.own_tag};
  }
  std::lock_guard<std::mutex> scanning(f.scan_mu);  // what is indexed now is appended under scan_mu
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.folders.emplace(f.node, std::move(made));
    g.order.push_back(&f);
  }
  index_new_tags(f, tags, made_after_mount(dir.real, growth_->loaded_at));
  f.last_scan = Clock::now();
  {
    const std::optional<std::string> text = f.own_tag.empty() ? ds::read_latest(f.real) : std::optional(f.own_tag);
    std::lock_guard<std::mutex> lock(f.mu);
    f.shown_latest = text.value_or("");
    const std::string named = ds::latest_tag(f.shown_latest);
    if (f.served.count(named)) {
      f.shown_tag = named;
    } else if (text && !f.served.empty()) {  // show the newest tag served, never one that is not
      const std::string newest = *std::max_element(f.served.begin(), f.served.end(), ds::tag_order);
      f.latest_note =
          "names " + pt::quoted(named) + ", which is not served; showing " + newest + ", the newest tag served";
      f.shown_latest = newest;
      f.shown_tag = newest;
    } else if (text) {
      f.latest_note = "names " + pt::quoted(named) + ", which is not served";
    }
  }
  const bool growing = opts_.rescan_seconds > 0 && opts_.tags.empty() && f.own_tag.empty();
  const bool run = new_run_folder(f);
  tree_.append([&](Tree& tree) {
    if (!f.own_tag.empty()) {
      struct stat st {};
      ::stat(f.real.c_str(), &st);
      tree.set_access(tree.add_real_dir(f.node, f.own_tag, st.st_mtim, f.real, true), access_of(st));
      Access text = access_of(st);
      text.perm &= 0444;
      tree.set_access(add_text(tree, f.node, "latest", f.own_tag, st.st_mtim), text);
    } else {
      mirror(&f, f.real, f.node);
    }
    tree.set_growing(f.node, growing);
    std::vector<const MountedTag*> served;
    for (const auto& t : f.tags) served.push_back(t.get());
    show_partial_tags(f, tags);
    ProviderContext cx = context(tree, f, true);
    for (const auto& p : providers()) {
      for (const MountedTag* t : served) p->add_tag(cx, *t);
      if (!served.empty()) p->add_folder(cx, served);
      if (f.node == Tree::kRoot) p->add_mount(tree, *this);
    }
    f.built = !served.empty();
    if (run) add_run(tree, f);
    tree.set_filled(f.node);
  });
}

}  // namespace zm::view
