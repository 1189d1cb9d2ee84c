#include "zeromount/view/view.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "growth.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace fs = std::filesystem;

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
      } else if (S_ISREG(st.st_mode) && dir == Tree::kRoot && name == "latest" && st.st_size <= ds::kLatestMaxBytes) {
        // DeepSpeed rewrites `latest` in place after every save: a live file, so that a rewrite
        // (or a touch) never makes it ESTALE, and it always names a tag the view serves.
        tree.set_access(add_latest(cx, st.st_mtim), access_of(st));
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
  g.serve(tag.index->tag);
  return tag;
}

uint64_t View::add_latest(ProviderContext& cx, struct timespec mtime) const {
  return cx.add_live_text(
      Tree::kRoot, "latest", [this] { return latest_text(); }, mtime);
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
  g.latest_text = dir.root_is_tag ? v->root_tag_ : ds::read_latest(dir.root).value_or("");

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
      g.refuse(tag, e.what(), fingerprint(td));
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
