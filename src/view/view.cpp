#include "zeromount/view/view.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace fs = std::filesystem;

void View::mirror(const std::string& real_dir, uint64_t dir) {
  std::vector<fs::directory_entry> entries;
  for (const auto& e : fs::directory_iterator(real_dir)) entries.push_back(e);
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  ProviderContext cx(tree_, files_, opts_, std::nullopt);
  for (const auto& e : entries) {
    const std::string name = e.path().filename().string();
    std::error_code ec;
    if (e.is_symlink(ec) && e.is_directory(ec)) {
      spdlog::warn("{}: symbolic link to a folder is not shown", e.path().string());
    } else if (e.is_directory(ec)) {
      struct stat st {};
      ::stat(e.path().c_str(), &st);
      mirror(e.path().string(), tree_.add_dir(dir, name, st.st_mtim));
    } else if (e.is_regular_file(ec)) {
      cx.add_real_file(dir, name, e.path().string());
      real_bytes_ += uint64_t(e.file_size(ec));
    }
  }
}

std::unique_ptr<View> View::load(const std::string& source, const ViewOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const ds::CheckpointDir dir = ds::scan_checkpoint(source);
  struct stat root_st {};
  ::stat(dir.root.c_str(), &root_st);
  std::unique_ptr<View> v(new View(opts, root_st.st_mtim));
  v->uid_ = getuid();
  v->gid_ = getgid();

  std::vector<std::string> tag_dirs;
  if (dir.root_is_tag) tag_dirs.push_back(dir.root);
  for (const auto& t : dir.tags) tag_dirs.push_back((fs::path(dir.root) / t).string());
  for (const auto& td : tag_dirs) {
    bool hit = false;
    auto ix = ds::index_tag_cached(td, &hit, opts.tp_strict);
    v->stats_.cache_hits += hit;
    auto mt = std::make_unique<MountedTag>();
    mt->index = ix.get();
    for (const auto& s : ix->shards) {
      const uint32_t id = v->files_.add(s.path);
      v->files_.expect(id, s.size, s.mtime_ns, s.inode);
      mt->file_of_shard.push_back(id);
    }
    v->stats_.state_bytes += ix->state_bytes();
    v->stats_.params += ix->params.size();
    v->indexes_.push_back(std::move(ix));
    v->tags_.push_back(std::move(mt));
  }
  const auto t1 = std::chrono::steady_clock::now();

  Tree& tree = v->tree_;
  const struct timespec mtime = root_st.st_mtim;
  // A tag folder mounted on its own becomes a checkpoint folder holding that one tag.
  const std::string root_tag = dir.root_is_tag ? fs::path(dir.root).filename().string() : "";
  ProviderContext cx(tree, v->files_, v->opts_, dir.root_is_tag ? std::optional(root_tag) : dir.latest);
  if (dir.root_is_tag) {
    v->mirror(dir.root, tree.add_dir(Tree::kRoot, root_tag, mtime));
    cx.add_text(Tree::kRoot, "latest", root_tag, mtime);
  } else {
    v->mirror(dir.root, Tree::kRoot);
  }
  std::vector<const MountedTag*> tags;
  for (const auto& t : v->tags_) tags.push_back(t.get());
  for (const auto& p : providers()) {
    for (const MountedTag* t : tags) p->add_tag(cx, *t);
    p->add_root(cx, tags);
  }
  v->stats_.tags = v->tags_.size();
  v->stats_.files = tree.files();
  v->stats_.nodes = tree.size();
  v->stats_.shards = v->files_.size();
  v->stats_.index_seconds = std::chrono::duration<double>(t1 - t0).count();
  return v;
}

const Inode& View::inode(uint64_t ino) const {
  const Inode* n = tree_.get(ino);
  if (!n) throw Error("no such inode " + std::to_string(ino), ENOENT);
  return *n;
}

struct stat View::attr(const Inode& n) const {
  struct stat st {};
  st.st_ino = n.ino;
  st.st_uid = uid_;
  st.st_gid = gid_;
  st.st_mtim = st.st_ctim = st.st_atim = n.mtime;
  st.st_blksize = kRequestBytes;
  if (n.dir) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2;
    return st;
  }
  st.st_mode = S_IFREG | 0444;
  st.st_nlink = 1;
  uint64_t size = n.size.load(std::memory_order_relaxed);
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
  if (offset == 0) return DirEntry{".", &dir, 1};
  if (offset == 1) return DirEntry{"..", tree_.get(dir.parent), 2};
  const Inode* n = tree_.listed_child(dir, offset - 2);
  if (!n) return std::nullopt;
  return DirEntry{n->name, n, offset + 1};
}

OpenFile View::open(const Inode& n, int flags) const {
  if (n.dir) throw Error(describe(n) + ": is a folder", EISDIR);
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) throw Error(describe(n) + ": read-only view", kChangeErrno);
  return OpenFile(n, content(n), files_);
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
