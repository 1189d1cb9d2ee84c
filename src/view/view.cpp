#include "zeromount/view/view.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace fs = std::filesystem;

using Clock = std::chrono::steady_clock;

struct View::Growth {
  std::vector<std::unique_ptr<ds::TagIndex>> indexes;  // appended at load, then under scan_mu
  std::vector<std::unique_ptr<MountedTag>> tags;
  std::mutex scan_mu;  // one rescan at a time
  Clock::time_point last_scan;
  std::map<std::string, std::string> attempts;  // tag -> fingerprint of its folder when it last failed

  mutable std::mutex mu;  // everything below
  std::set<std::string> served;
  std::vector<TagError> errors;
  std::string latest_text;  // what `latest` shows
  std::optional<std::string> latest_tag;
  size_t tags_after_mount = 0;
  std::map<int, std::unique_ptr<ReaderCount>> readers;  // by opening process
};

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \n\r\t"), e = s.find_last_not_of(" \n\r\t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// SRC's `latest` as DeepSpeed wrote it, or nothing (absent, not a small regular file, unreadable).
std::optional<std::string> read_latest(const std::string& root) {
  const std::string path = root + "/latest";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 4096) return std::nullopt;
  try {
    const pt::File f(path);
    return f.read_string(0, size_t(f.size()), "latest");
  } catch (const Error&) {
    return std::nullopt;
  }
}

// What a save in progress changes in a tag folder: its names, sizes and times.
std::string fingerprint(const std::string& dir) {
  std::vector<std::string> items;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    items.push_back(it->path().filename().string() + " " + std::to_string(st.st_size) + " " +
                    std::to_string(pt::mtime_ns(st)));
  }
  std::sort(items.begin(), items.end());
  std::string fp;
  for (const auto& i : items) fp += i + "\n";
  return fp;
}

}  // namespace

View::View(const ViewOptions& opts, struct timespec mtime)
    : opts_(opts), tree_(mtime), growth_(std::make_unique<Growth>()) {}

View::~View() = default;

void View::mirror(const std::string& real_dir, uint64_t dir) const {
  std::vector<fs::directory_entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(real_dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
  if (ec) {  // shown as the kernel would: the folder with its own mode, which says who may list it
    spdlog::warn("{}: cannot list ({}); shown empty", real_dir, ec.message());
    return;
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  Tree& tree = tree_;  // at load, or under Tree::append
  ProviderContext cx(tree, files_, opts_, *this, true);
  for (const auto& e : entries) {
    const std::string name = e.path().filename().string();
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0) continue;  // gone since it was listed
    if (const Inode* had = tree.lookup(dir, name)) {    // shown before: a name keeps its meaning
      if (had->dir && S_ISDIR(st.st_mode) && had->made_by == nullptr) mirror(e.path().string(), had->ino);
      continue;
    }
    try {
      if (S_ISLNK(st.st_mode)) {
        // Links stay links (dangling ones and loops included): readlink gives the stored target.
        std::string target(size_t(st.st_size > 0 ? st.st_size : 4096), '\0');
        const ssize_t n = ::readlink(e.path().c_str(), target.data(), target.size());
        if (n < 0) continue;
        target.resize(size_t(n));
        tree.set_access(tree.add_link(dir, name, st.st_mtim, target), access_of(st));
      } else if (S_ISDIR(st.st_mode)) {
        const uint64_t d = tree.add_dir(dir, name, st.st_mtim);
        tree.set_access(d, access_of(st));
        mirror(e.path().string(), d);
      } else if (S_ISREG(st.st_mode) && dir == Tree::kRoot && name == "latest" && st.st_size <= 4096) {
        // DeepSpeed rewrites `latest` in place after every save: a live file, so that a rewrite
        // (or a touch) never makes it ESTALE, and it always names a tag the view serves.
        const uint64_t ino = cx.add_live_text(
            dir, name, [this] { return latest_text(); }, st.st_mtim);
        tree.set_access(ino, access_of(st));
        real_bytes_ += uint64_t(st.st_size);
      } else if (S_ISREG(st.st_mode)) {
        cx.add_real_file(dir, name, e.path().string());
        real_bytes_ += uint64_t(st.st_size);
      }
    } catch (const Error& err) {
      spdlog::warn("{}: not shown: {}", e.path().string(), err.what());
    }
  }
}

const MountedTag& View::add_tag(const std::string& td, bool* cache_hit) const {
  auto ix = ds::index_tag_cached(td, cache_hit, opts_.tp_strict);
  ix->tag = fs::path(td).filename().string();  // a linked tag is named by its link, not its target
  auto mt = std::make_unique<MountedTag>();
  mt->index = ix.get();
  mt->crc_source = opts_.crc ? &files_ : nullptr;
  std::vector<Access> shard_access;
  for (const auto& s : ix->shards) {
    const uint32_t id = files_.add(s.path);
    files_.expect(id, s.size, s.mtime_ns, s.inode);
    mt->file_of_shard.push_back(id);
    shard_access.push_back(access_of(files_.stat(id)));
  }
  struct stat tag_st {};
  ::stat(td.c_str(), &tag_st);
  mt->folder = access_of(tag_st);
  mt->files = least_of(shard_access);
  const MountedTag& tag = *mt;
  Growth& g = *growth_;
  g.indexes.push_back(std::move(ix));
  g.tags.push_back(std::move(mt));
  std::lock_guard<std::mutex> lock(g.mu);
  g.served.insert(tag.index->tag);
  std::erase_if(g.errors, [&](const TagError& e) { return e.tag == tag.index->tag; });
  return tag;
}

bool View::served(const std::string& tag) const {
  std::lock_guard<std::mutex> lock(growth_->mu);
  return growth_->served.count(tag) > 0;
}

std::unique_ptr<View> View::load(const std::string& source, const ViewOptions& opts) {
  const auto t0 = Clock::now();
  const ds::CheckpointDir dir = ds::scan_checkpoint(source);
  struct stat root_st {};
  ::stat(dir.root.c_str(), &root_st);
  std::unique_ptr<View> v(new View(opts, root_st.st_mtim));
  v->tree_.set_access(Tree::kRoot, access_of(root_st));
  v->uid_ = getuid();
  v->gid_ = getgid();
  v->root_ = dir.root;
  // A tag folder mounted on its own becomes a checkpoint folder holding that one tag.
  if (dir.root_is_tag) v->root_tag_ = fs::path(dir.root).filename().string();
  Growth& g = *v->growth_;
  g.latest_tag = dir.root_is_tag ? std::optional(v->root_tag_) : dir.latest;
  g.latest_text = dir.root_is_tag ? v->root_tag_ : read_latest(dir.root).value_or("");

  std::vector<std::string> tag_dirs;
  if (dir.root_is_tag) tag_dirs.push_back(dir.root);
  for (const auto& t : dir.tags) tag_dirs.push_back((fs::path(dir.root) / t).string());
  for (const auto& t : opts.tags)
    if (std::find(dir.tags.begin(), dir.tags.end(), t) == dir.tags.end() && v->root_tag_ != t)
      throw Error(source + ": --tag " + t + ": no such tag folder (with *_optim_states.pt files)", ENOENT);
  for (const auto& td : tag_dirs) {
    const std::string tag = fs::path(td).filename().string();
    const bool named = std::find(opts.tags.begin(), opts.tags.end(), tag) != opts.tags.end();
    if (!opts.tags.empty() && !named) continue;
    // One tag that cannot be indexed (a save in progress, a truncated rank) never takes the rest of
    // the folder down: it is shown as its real files only, and the reason is logged and kept in
    // .zeromount/errors. A tag named with --tag must index.
    try {
      bool hit = false;
      const MountedTag& t = v->add_tag(td, &hit);
      v->stats_.cache_hits += hit;
      v->stats_.state_bytes += t.index->state_bytes();
      v->stats_.params += t.index->params.size();
    } catch (const Error& e) {
      if (named) throw;
      spdlog::error("{}: not served: {}", tag, e.what());
      g.errors.push_back({tag, e.what()});
      g.attempts[tag] = fingerprint(td);
    }
  }
  v->stats_.refused_tags = g.errors.size();
  const auto t1 = Clock::now();

  Tree& tree = v->tree_;
  const struct timespec mtime = root_st.st_mtim;
  ProviderContext cx(tree, v->files_, v->opts_, *v, true);
  if (dir.root_is_tag) {
    const uint64_t tag_dir = tree.add_dir(Tree::kRoot, v->root_tag_, mtime);
    tree.set_access(tag_dir, access_of(root_st));
    v->mirror(dir.root, tag_dir);
    Access text = access_of(root_st);
    text.perm &= 0444;
    tree.set_access(cx.add_text(Tree::kRoot, "latest", v->root_tag_, mtime), text);
  } else {
    v->mirror(dir.root, Tree::kRoot);
    if (opts.rescan_seconds > 0 && opts.tags.empty()) {
      // Where a tag saved after the mount, or one still being written, may add names.
      tree.set_growing(Tree::kRoot, true);
      for (const auto& e : g.errors)
        if (const Inode* d = tree.lookup(Tree::kRoot, e.tag); d && d->dir) tree.set_growing(d->ino, true);
    }
  }
  std::vector<const MountedTag*> tags;
  for (const auto& t : g.tags) tags.push_back(t.get());
  for (const auto& p : providers()) {
    for (const MountedTag* t : tags) p->add_tag(cx, *t);
    p->add_root(cx, tags);
  }
  g.last_scan = Clock::now();
  v->stats_.tags = tags.size();
  v->stats_.files = tree.files();
  v->stats_.nodes = tree.size();
  v->stats_.shards = v->files_.size();
  v->stats_.index_seconds = std::chrono::duration<double>(t1 - t0).count();
  return v;
}

void View::show_new_tag(const std::string& td, const MountedTag& tag) const {
  tree_.append([&](Tree& tree) {
    const std::string& name = tag.index->tag;
    const Inode* had = tree.lookup(Tree::kRoot, name);
    if (had && had->made_by) return;  // the name means something else already
    struct stat st {};
    if (had && had->dir) {  // refused at mount, or mirrored before its first shard was written
      mirror(td, had->ino);
      tree.set_growing(had->ino, false);
    } else if (!had && ::lstat(td.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode)) {  // a linked tag stays a link, as at mount
        std::error_code ec;
        tree.set_access(tree.add_link(Tree::kRoot, name, st.st_mtim, fs::read_symlink(td, ec).string()), access_of(st));
      } else {
        const uint64_t d = tree.add_dir(Tree::kRoot, name, st.st_mtim);
        tree.set_access(d, access_of(st));
        mirror(td, d);
      }
    }
    if (!tree.lookup(Tree::kRoot, "latest") && read_latest(root_)) {  // the first save into an empty folder
      ProviderContext cx(tree, files_, opts_, *this, true);
      cx.add_live_text(
          Tree::kRoot, "latest", [this] { return latest_text(); }, tree.get(Tree::kRoot)->mtime);
    }
    follow_latest();
    ProviderContext cx(tree, files_, opts_, *this, false);
    for (const auto& p : providers()) p->add_tag(cx, tag);
  });
}

bool View::refresh() const {
  if (opts_.rescan_seconds <= 0 || !root_tag_.empty() || !opts_.tags.empty()) return false;
  Growth& g = *growth_;
  std::unique_lock scanning(g.scan_mu, std::try_to_lock);
  if (!scanning) return false;  // another request is rescanning; it adds what is new
  const auto now = Clock::now();
  if (now - g.last_scan < std::chrono::duration<double>(opts_.rescan_seconds)) return false;
  g.last_scan = now;
  ds::CheckpointDir dir;
  try {
    dir = ds::scan_checkpoint(root_);
  } catch (const Error& e) {
    spdlog::warn("rescan: {}", e.what());
    return false;
  }
  bool added = false;
  for (const auto& tag : dir.tags) {
    if (served(tag)) continue;
    const std::string td = (fs::path(root_) / tag).string();
    std::string fp = fingerprint(td);
    if (auto it = g.attempts.find(tag); it != g.attempts.end() && it->second == fp) continue;
    try {
      const MountedTag& t = add_tag(td);
      show_new_tag(td, t);
      g.attempts.erase(tag);
      {
        std::lock_guard<std::mutex> lock(g.mu);
        ++g.tags_after_mount;
      }
      spdlog::info("{}: indexed after the mount, now served ({} parameters)", tag, t.index->params.size());
      added = true;
    } catch (const Error& e) {
      // Most often a save still in progress: tried again once the folder changes.
      spdlog::info("{}: not served yet: {}", tag, e.what());
      std::lock_guard<std::mutex> lock(g.mu);
      std::erase_if(g.errors, [&](const TagError& x) { return x.tag == tag; });
      g.errors.push_back({tag, e.what()});
      g.attempts[tag] = std::move(fp);
    }
  }
  return added;
}

std::optional<std::string> View::follow_latest() const {
  const std::optional<std::string> now = read_latest(root_);
  if (!now) return std::nullopt;
  const std::string tag = trimmed(*now);
  std::lock_guard<std::mutex> lock(growth_->mu);
  if (growth_->served.count(tag)) {
    growth_->latest_text = *now;
    growth_->latest_tag = tag;
  }
  return tag;
}

std::string View::latest_text() const {
  if (!root_tag_.empty()) return root_tag_;
  // A latest naming a tag not served yet: the save that rewrote it has most likely just finished.
  if (const auto tag = follow_latest(); tag && !served(*tag) && refresh()) follow_latest();
  std::lock_guard<std::mutex> lock(growth_->mu);
  return growth_->latest_text;
}

std::optional<std::string> View::latest_tag() const {
  std::lock_guard<std::mutex> lock(growth_->mu);
  const auto& t = growth_->latest_tag;
  return t && growth_->served.count(*t) ? t : std::nullopt;
}

std::string View::errors_text() const {
  std::lock_guard<std::mutex> lock(growth_->mu);
  std::string text;
  for (const auto& e : growth_->errors) text += e.tag + ": " + e.reason + "\n";
  return text;
}

std::string View::stats_text() const {
  const Growth& g = *growth_;
  std::lock_guard<std::mutex> lock(g.mu);
  uint64_t requests = 0;
  for (const auto& [pid, c] : g.readers) requests += c->requests.load(std::memory_order_relaxed);
  std::string s = "tags_served " + std::to_string(g.served.size()) + "\ntags_refused " +
                  std::to_string(g.errors.size()) + "\ntags_after_mount " + std::to_string(g.tags_after_mount) +
                  "\nbytes_from_shards " + std::to_string(files_.bytes_read()) + "\nrequests " +
                  std::to_string(requests) + "\n";
  for (const auto& [pid, c] : g.readers)
    if (c->bytes.load(std::memory_order_relaxed) > 0)
      s += "pid " + std::to_string(pid) + " bytes " + std::to_string(c->bytes.load(std::memory_order_relaxed)) + "\n";
  return s;
}

const Inode* View::lookup(uint64_t parent, std::string_view name) const {
  const Inode* n = tree_.lookup(parent, name);
  if (n) return n;
  const Inode* p = tree_.get(parent);
  return p && p->growing && refresh() ? tree_.lookup(parent, name) : nullptr;
}

const Inode& View::inode(uint64_t ino) const {
  const Inode* n = tree_.get(ino);
  if (!n) throw Error("no such inode " + std::to_string(ino), ENOENT);
  return *n;
}

Access View::access(const Inode& n) const {
  if (n.access.set) return n.access;
  // Made-up entries below a top-level made-up folder: folders take its access, files its files_below.
  for (const Inode* p = tree_.get(n.parent); p; p = p->ino == Tree::kRoot ? nullptr : tree_.get(p->parent)) {
    const Access& a = n.dir ? p->access : p->files_below;
    if (a.set) return a;
  }
  return {n.dir ? 0555u : 0444u, uid_, gid_, true};
}

struct stat View::attr(const Inode& n) const {
  struct stat st {};
  st.st_ino = n.ino;
  const Access a = access(n);
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_mtim = st.st_ctim = st.st_atim = n.mtime;
  st.st_blksize = kRequestBytes;
  if (n.dir) {
    st.st_mode = S_IFDIR | (a.perm & 0555);
    st.st_nlink = 2;
    return st;
  }
  if (!n.link.empty()) {
    st.st_mode = S_IFLNK | 0777;
    st.st_nlink = 1;
    st.st_size = off_t(n.link.size());
    return st;
  }
  st.st_mode = S_IFREG | (a.perm & 0555);
  st.st_nlink = 1;
  uint64_t size = n.live ? Inode::kUnknown : n.size.load(std::memory_order_relaxed);
  if (size == Inode::kUnknown && n.sizer) n.size.store(size = n.sizer(), std::memory_order_relaxed);
  if (size == Inode::kUnknown) size = content(n)->size();
  st.st_size = off_t(size);
  st.st_blocks = blkcnt_t((size + 511) / 512);
  return st;
}

void View::open_dir(const Inode& n) const {
  if (!n.dir) throw Error(describe(n) + ": not a folder", ENOTDIR);
}

std::optional<DirEntry> View::dir_entry(const Inode& dir, uint64_t offset) const {
  if (!dir.dir) throw Error(describe(dir) + ": not a folder", ENOTDIR);
  if (offset == 0 && dir.growing) refresh();  // a new listing may show tags saved since
  if (offset == 0) return DirEntry{".", &dir, 1};
  if (offset == 1) return DirEntry{"..", tree_.get(dir.parent), 2};
  const Inode* n = tree_.listed_child(dir, offset - 2);
  if (!n) return std::nullopt;
  return DirEntry{n->name, n, offset + 1};
}

std::string View::readlink(const Inode& n) const {
  if (n.link.empty()) throw Error(describe(n) + ": not a symbolic link", EINVAL);
  return n.link;
}

OpenFile View::open(const Inode& n, int flags, int reader) const {
  if (!n.link.empty()) throw Error(describe(n) + ": a symbolic link is resolved by the kernel", ELOOP);
  if (n.dir) throw Error(describe(n) + ": is a folder", EISDIR);
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) throw Error(describe(n) + ": read-only view", kChangeErrno);
  auto built = content(n);
  std::lock_guard<std::mutex> lock(growth_->mu);
  auto& readers = growth_->readers;
  constexpr size_t kMaxReaders = 4096;  // a long mount sees many processes: the rest count as pid 0
  if (readers.size() >= kMaxReaders && !readers.count(reader)) reader = 0;
  auto& count = readers[reader];
  if (!count) count = std::make_unique<ReaderCount>();
  return OpenFile(n, std::move(built), files_, count.get());
}

FsStats View::statfs() const {
  FsStats s;
  s.blocks = (real_bytes_ + s.block_size - 1) / s.block_size;
  // No inode can be created, but reporting them all as used makes df say 100%: report none.
  s.files = s.files_free = 0;
  return s;
}

std::shared_ptr<const pt::VirtualFile> View::content(const Inode& n) const {
  if (n.dir || !n.build) throw Error("not a file", EISDIR);
  if (n.live) return std::make_shared<const pt::VirtualFile>(n.build());  // never cached: it follows SRC
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cached_.find(n.ino);
    if (it != cached_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto built = std::make_shared<const pt::VirtualFile>(n.build());
  const uint64_t known = n.size.load(std::memory_order_relaxed);
  if (known == Inode::kUnknown)
    n.size.store(built->size(), std::memory_order_relaxed);
  else if (known != built->size())
    throw Error(describe(n) + ": size changed from " + std::to_string(known) + " to " + std::to_string(built->size()),
                EIO);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cached_.count(n.ino)) return built;  // another thread built it too; theirs is cached
  lru_.emplace_front(n.ino, built);
  cached_.emplace(n.ino, lru_.begin());
  cached_bytes_ += built->memory_bytes();
  while (cached_bytes_ > opts_.cache_bytes && lru_.size() > 1) {
    cached_bytes_ -= lru_.back().second->memory_bytes();
    cached_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return built;
}

std::string View::describe(const Inode& n) const {
  std::string path;
  for (const Inode* p = &n; p && p->ino != Tree::kRoot; p = tree_.get(p->parent)) path = "/" + p->name + path;
  return path.empty() ? "/" : path;
}

}  // namespace zm::view
