// A checkpoint folder of the mount (View::Folder, checkpoint_folder.h): its first fill (its real
// entries, the index of the tags it holds, every provider's entries beside them), then what is saved
// into it later, its `latest` following the source, and tags deleted by a keep-last-N cleanup
// (docs/ARCHITECTURE.md, "Growth").
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "checkpoint_folder.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/source_path.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/file.h"
#include "zeromount/pt/text.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace fs = std::filesystem;

std::string fingerprint(const std::string& dir) {
  std::vector<std::string> items;
  const ds::Dir d = ds::open_dir(dir);
  std::error_code ec;
  for (const ds::Dir::Entry& e : d.ok() ? d.list(ec) : std::vector<ds::Dir::Entry>{}) {
    struct stat st {};
    if (!d.stat(e.name, st)) continue;
    items.push_back(e.name + " " + std::to_string(st.st_size) + " " + std::to_string(pt::mtime_ns(st)));
  }
  std::sort(items.begin(), items.end());
  std::string fp;
  for (const auto& i : items) fp += i + "\n";
  return fp;
}

void View::Folder::refuse(const std::string& tag, const std::string& reason, std::string folder_fingerprint) const {
  attempts_[tag] = std::move(folder_fingerprint);
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(errors, [&](const TagError& e) { return e.tag == tag; });
  errors.push_back({tag, reason});
}

void View::Folder::serve(const std::string& tag) const {
  attempts_.erase(tag);
  std::lock_guard<std::mutex> lock(mu);
  served.insert(tag);
  std::erase_if(errors, [&](const TagError& e) { return e.tag == tag; });
}

void View::Folder::lose(const std::string& tag) const {
  std::lock_guard<std::mutex> lock(mu);
  served.erase(tag);
  lost.insert(tag);  // counted in stats (tags_deleted), not a line of errors: a keep-last-N run
                     // deletes a checkpoint at every save, and errors would grow without bound
}

bool View::Folder::is_tag(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu);
  return known.count(name) > 0;
}

void View::Folder::refuse_entry(const std::string& entry, const std::string& reason) const {
  constexpr size_t kMax = 256;  // anyone may look up any number of refused names
  std::lock_guard<std::mutex> lock(mu);
  if (refused_entries.size() < kMax) refused_entries.emplace(entry, reason);
}

std::vector<std::pair<std::string, std::string>> View::Folder::error_lines(
    const std::function<std::string(const std::string&)>& in_mount) const {
  std::vector<std::pair<std::string, std::string>> lines;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& e : errors) lines.emplace_back(e.tag, inside(e.tag) + ": " + in_mount(e.reason) + "\n");
  if (!latest_note.empty()) lines.emplace_back("latest", inside("latest") + ": " + latest_note + "\n");
  for (const auto& [entry, reason] : refused_entries)
    lines.emplace_back(entry.substr(0, entry.find('/')), inside(entry) + ": " + in_mount(reason) + "\n");
  return lines;
}

std::vector<const MountedTag*> View::Folder::indexed_tags() const {
  std::vector<const MountedTag*> out;
  for (const auto& t : tags) out.push_back(t.get());
  return out;
}

std::pair<size_t, size_t> View::Folder::tag_counts() const {
  std::lock_guard<std::mutex> lock(mu);
  const auto refused =
      std::count_if(errors.begin(), errors.end(), [&](const TagError& e) { return !lost.count(e.tag); });
  return {served.size(), size_t(refused)};
}

bool View::Folder::is_served(const std::string& tag) const {
  std::lock_guard<std::mutex> lock(mu);
  return served.count(tag) > 0;
}

std::optional<std::string> View::Folder::latest_tag() const {
  std::lock_guard<std::mutex> lock(mu);
  return shown_tag_ && served.count(*shown_tag_) ? shown_tag_ : std::nullopt;
}

namespace {

// How long a request waits for a network source's rescan, or its read of `latest`, before it
// answers with what is known: a backend that answers lists within it, so a new tag is seen by the
// request that asked, as on a local disk; one that is gone holds the work below for a minute.
constexpr std::chrono::milliseconds kNetworkWait{500};

// Runs `work` for a request: here on a local source; on a network source on the View's rescan
// thread, waiting kNetworkWait at most, once at a time (`posted`): a request that finds one on its
// way goes on with what is known, and what it finds is there for the next. True if `work` ran
// here or finished in time and said true.
bool off_path(OffPath* rescans, std::atomic<bool>& posted, std::function<bool()> work) {
  if (!rescans) return work();
  if (posted.exchange(true)) return false;
  auto said = std::make_shared<bool>(false);
  return rescans->run(
             [&posted, said, work = std::move(work)] {
               struct Done {
                 std::atomic<bool>& posted;
                 ~Done() { posted = false; }
               } done{posted};
               *said = work();
             },
             kNetworkWait, OffPath::Unwaited::Keep) &&
         *said;
}

}  // namespace

bool View::Folder::refresh() const {
  const ViewOptions& o = view.opts_;
  if (o.rescan_seconds <= 0 || !own_tag.empty() || !o.tags.empty() || real == o.mount_point) return false;
  return off_path(view.rescans_.get(), rescan_posted_, [this] { return rescan(); });
}

bool View::Folder::rescan() const {
  const ViewOptions& o = view.opts_;
  {
    std::unique_lock scanning(scan_mu, std::try_to_lock);
    if (!scanning) return false;  // another request is rescanning; it adds what is new
    const auto now = Clock::now();
    if (now - last_scan_ < std::chrono::duration<double>(o.rescan_seconds)) return false;
    last_scan_ = now;
  }
  // Listed outside scan_mu, which listings of what is served take (served_tags): a slow source
  // holds up this rescan only. last_scan_ keeps a second one from starting meanwhile.
  ds::CheckpointDir dir;
  std::string error;
  try {
    dir = ds::scan_folder(real, o.mount_point);
  } catch (const Error& e) {
    error = e.what();
  }
  std::unique_lock scanning(scan_mu);
  if (!error.empty()) {
    if (scan_error_ != error) spdlog::warn("rescan: {}", error);  // once, not every second
    scan_error_ = error;
    return false;
  }
  scan_error_.clear();
  for (const auto& [name, why] : dir.refused) refuse_entry(name, why);
  forget_deleted(dir.tags);
  const size_t before = tags.size();
  index_new_tags(dir.tags, true);
  std::vector<const MountedTag*> added;
  for (size_t k = before; k < tags.size(); ++k) added.push_back(tags[k].get());
  Tree& tree = view.tree_;
  const size_t nodes = tree.size();
  // Listed before the tree's lock is taken: on a network source whose backend is gone the listing
  // waits on it, and lookups and listings of what is known must not (issue 40).
  const RealListing listing = list_real(real, o.mount_point);
  tree.append([&](Tree&) {
    mirror(view, this, listing, node);  // new real entries: a Trainer's checkpoint-N/, trainer_state.json
    show_partial_tags(dir.tags);
  });
  show_tags(added);
  if (new_run_folder()) tree.append([&](Tree& t) { add_run(t); });  // its first checkpoint-N/
  return !added.empty() || tree.size() != nodes;
}

void View::Folder::forget_deleted(const std::vector<std::string>& present) const {
  std::vector<const MountedTag*> gone;
  for (const auto& t : tags)
    if (is_served(t->index->tag) && std::find(present.begin(), present.end(), t->index->tag) == present.end())
      gone.push_back(t.get());
  // Folders below that were deleted with what they hold (a Trainer's checkpoint-N/).
  Growth& g = *view.growth_;
  std::vector<const Folder*> below;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    for (const auto& [ino, b] : g.folders)
      if (b->parent == node) below.push_back(b.get());
  }
  std::erase_if(below, [](const Folder* b) { return ds::is_folder(b->real); });
  for (const Folder* b : below) {
    // Its tags are read under its scan lock; a folder being rescanned now is seen to next time.
    std::unique_lock<std::mutex> scanning(b->scan_mu, std::try_to_lock);
    if (scanning) b->forget_deleted({});
  }
  if (gone.empty()) return;
  view.tree_.append([&](Tree& tree) {
    ProviderContext cx = context(tree, false);
    for (const MountedTag* t : gone) {
      lose(t->index->tag);
      spdlog::info("{}: deleted from the source; no longer served", inside(t->index->tag));
      for (const auto& p : providers()) p->drop_tag(cx, *t);
    }
  });
  std::lock_guard<std::mutex> lock(g.mu);
  g.tags_deleted += gone.size();
}

std::optional<std::string> View::Folder::take_latest(const std::optional<std::string>& text) const {
  const std::string named = ds::latest_tag(text.value_or(""));
  std::lock_guard<std::mutex> lock(mu);
  const bool first = !std::exchange(latest_taken_, true);
  if (text && served.count(named)) {
    shown_latest_ = *text;
    shown_tag_ = named;
    latest_note.clear();
  } else if (first) {
    shown_latest_ = text.value_or("");
    if (text && !served.empty()) {  // show the newest tag served, never one that is not
      const std::string newest = *std::max_element(served.begin(), served.end(), ds::tag_order);
      latest_note =
          "names " + pt::quoted(named) + ", which is not served; showing " + newest + ", the newest tag served";
      shown_latest_ = newest;
      shown_tag_ = newest;
    } else if (text) {
      latest_note = "names " + pt::quoted(named) + ", which is not served";
    }
  }
  return text ? std::optional(named) : std::nullopt;
}

std::optional<std::string> View::Folder::follow_latest() const {
  if (!own_tag.empty()) return own_tag;
  const ViewOptions& o = view.opts_;
  if (!o.network_source) return take_latest(ds::read_latest(real));
  // On a network source every read of SRC/latest is a request: the text read is kept for the rescan
  // period, and read again off the request path, the first time included (the request that asks
  // after the mount may come during an outage: read here, it waited for the backend's own
  // timeout). A backend gone leaves `latest` as it was last read.
  const auto at = Clock::now();
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    fresh = read_latest_ && at - read_latest_at_ < std::chrono::duration<double>(o.rescan_seconds);
  }
  const auto read = [this, at] {
    auto text = ds::read_latest(real);
    std::lock_guard<std::mutex> lock(mu);
    read_latest_ = std::move(text);
    read_latest_at_ = at;
    return true;
  };
  if (!fresh) off_path(view.rescans_.get(), latest_posted_, read);
  std::optional<std::string> now;
  {
    std::lock_guard<std::mutex> lock(mu);
    now = read_latest_;
  }
  return take_latest(now);
}

std::string View::Folder::latest_text() const {
  if (!own_tag.empty()) return own_tag;
  // A latest naming a tag not served yet: the save that rewrote it has most likely just finished.
  if (const auto tag = follow_latest(); tag && !is_served(*tag) && refresh()) follow_latest();
  std::lock_guard<std::mutex> lock(mu);
  return shown_latest_;
}

std::vector<NamedTag> View::Folder::served_tags() const {
  refresh();
  const bool network = view.opts_.network_source;
  std::vector<NamedTag> out;
  const auto own = [&](const Folder& g, const std::string& prefix) {
    std::lock_guard<std::mutex> scanning(g.scan_mu);  // what is indexed is appended under it
    // A tag folder deleted since the last rescan (a keep-last-N cleanup) is left out at once; on a
    // network source, where that look is a request per tag, at the next rescan.
    for (const auto& t : g.tags)
      if (g.is_served(t->index->tag) && (network || ds::is_folder(t->index->dir)))
        out.push_back({prefix + t->index->tag, t.get()});
  };
  own(*this, "");
  if (out.empty() && run) {
    const Tree& tree = view.tree_;
    const Inode& dir = *tree.get(node);
    for (uint64_t k = 0; const Inode* n = tree.listed_child(dir, k); ++k) {
      if (!n->is_dir() || n->folder().real.empty() || n->folder().plain || n->made_by) continue;
      view.fill(*n);
      const Folder* below = nullptr;
      {
        std::lock_guard<std::mutex> lock(view.growth_->mu);
        if (auto it = view.growth_->folders.find(n->ino); it != view.growth_->folders.end()) below = it->second.get();
      }
      if (!below) continue;
      below->refresh();
      own(*below, n->name + "/");
    }
  }
  std::sort(out.begin(), out.end(), [](const NamedTag& a, const NamedTag& b) { return ds::tag_order(a.path, b.path); });
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
  if (built) {  // what the providers' add_tag will need, made before the tree's lock
    ProviderContext cx = context(view.tree_, false);
    for (const auto& p : providers())
      for (const MountedTag* t : added) p->prepare_tag(cx, *t);
  }
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
