#include "zeromount/view/view.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint_folder.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace fs = std::filesystem;

View::View(const ViewOptions& opts, struct timespec mtime)
    : opts_(opts),
      tree_(mtime),
      growth_(std::make_unique<Growth>()),
      built_(opts.cache_bytes, [](const pt::VirtualFile& f) { return uint64_t(f.memory_bytes()); }) {}

void View::start_serving() const {
  // After the daemon's fork, before the first request: threads started earlier would be gone in
  // the child, with their jobs half done. Until then (the load, an export) reads and rescans of a
  // network source run where they are asked, with no deadline.
  if (opts_.source_timeout_seconds > 0)
    files_.set_deadline(std::chrono::milliseconds(int64_t(opts_.source_timeout_seconds * 1000)));
  // A network source's rescans (a listing of SRC, its `latest`) run on a thread of their own.
  if (opts_.network_source) rescans_ = std::make_unique<OffPath>(1);
}

View::~View() = default;

std::unique_ptr<View> View::load(const std::string& source, const ViewOptions& opts) {
  const auto t0 = Clock::now();
  const ds::CheckpointDir dir = ds::scan_checkpoint(source, opts.mount_point);
  struct stat root_st {};
  ::stat(dir.root.c_str(), &root_st);
  std::unique_ptr<View> v(new View(opts, root_st.st_mtim));
  v->tree_.set_access(Tree::kRoot, access_of(root_st));
  v->uid_ = getuid();
  v->gid_ = getgid();
  v->root_ = dir.root;
  for (const auto& t : opts.tags)
    if (std::find(dir.tags.begin(), dir.tags.end(), t) == dir.tags.end() &&
        !(dir.root_is_tag && fs::path(dir.root).filename() == t))
      throw Error(source + ": --tag " + t + ": no such tag folder (with *_optim_states.pt files)", ENOENT);
  Tree& tree = v->tree_;
  // SRC is filled now, like any real folder on first use, so that its tags' reasons reach the
  // terminal; the folders below it wait for their first lookup or listing.
  tree.make_real(Tree::kRoot, dir.root);
  v->fill(*tree.get(Tree::kRoot), &dir);
  const auto t1 = Clock::now();

  const Folder& root = *v->growth_->folders.at(Tree::kRoot);
  const std::vector<const MountedTag*> tags = root.indexed_tags();
  for (const MountedTag* t : tags) {
    v->stats_.state_bytes += t->index->state_bytes();
    v->stats_.params += t->index->params.size();
  }
  v->stats_.tags = tags.size();
  v->stats_.cache_hits = v->growth_->cache_hits;
  v->stats_.refused_tags = root.tag_counts().second;
  for (uint64_t c : tree.get(Tree::kRoot)->folder().children)
    v->stats_.folders += tree.get(c)->is_dir() && !tree.get(c)->folder().real.empty();
  v->stats_.files = tree.files();
  v->stats_.nodes = tree.size();
  v->stats_.shards = v->files_.size();
  v->stats_.index_seconds = std::chrono::duration<double>(t1 - t0).count();
  clock_gettime(CLOCK_REALTIME, &v->growth_->loaded_at);
  return v;
}

const Inode* View::lookup(uint64_t parent, std::string_view name, bool ref) const {
  const Inode* p = tree_.get(parent);
  if (!p) return nullptr;
  fill(*p);
  const Inode* n = tree_.lookup(parent, name, ref);
  if (n) return n;
  return p->is_dir() && p->folder().growing && refresh(*p) ? tree_.lookup(parent, name, ref) : nullptr;
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
    const Access& a = n.is_dir() ? p->access : p->files_below;
    if (a.set) return a;
  }
  return {n.is_dir() ? 0555u : 0444u, uid_, gid_, true};
}

struct stat View::attr(const Inode& n, const Caller& who) const {
  struct stat st {};
  st.st_ino = n.ino;
  const Access a = access(n);
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_mtim = st.st_ctim = st.st_atim = n.mtime;
  st.st_blksize = kRequestBytes;
  if (n.is_dir()) {
    st.st_mode = S_IFDIR | (a.perm & 0555);
    st.st_nlink = 2;
    return st;
  }
  if (const std::string* target = n.link()) {
    st.st_mode = S_IFLNK | 0777;
    st.st_nlink = 1;
    st.st_size = off_t(target->size());
    return st;
  }
  st.st_mode = S_IFREG | (a.perm & 0555);
  st.st_nlink = 1;
  const FileData& f = n.file();
  uint64_t size = f.live ? Inode::kUnknown : f.size.load(std::memory_order_relaxed);
  if (size == Inode::kUnknown && f.sizer) f.size.store(size = f.sizer(), std::memory_order_relaxed);
  if (size == Inode::kUnknown) size = content(n, who)->size();
  st.st_size = off_t(size);
  st.st_blocks = blkcnt_t((size + 511) / 512);
  return st;
}

void View::open_dir(const Inode& n) const {
  if (!n.is_dir()) throw Error(describe(n) + ": not a folder", ENOTDIR);
}

std::optional<DirEntry> View::dir_entry(const Inode& dir, uint64_t offset, bool ref) const {
  if (!dir.is_dir()) throw Error(describe(dir) + ": not a folder", ENOTDIR);
  fill(dir);
  if (offset == 0 && dir.folder().growing) refresh(dir);  // a new listing may show what was saved since
  if (offset == 0) return DirEntry{".", &dir, 1};
  if (offset == 1) return DirEntry{"..", tree_.get(dir.parent), 2};
  const Inode* n = tree_.listed_child(dir, offset - 2, ref);
  if (!n) return std::nullopt;
  return DirEntry{n->name, n, offset + 1};
}

std::string View::readlink(const Inode& n) const {
  const std::string* target = n.link();
  if (!target) throw Error(describe(n) + ": not a symbolic link", EINVAL);
  return *target;
}

OpenFile View::open(const Inode& n, int flags, const Caller& who) const {
  if (n.link()) throw Error(describe(n) + ": a symbolic link is resolved by the kernel", ELOOP);
  if (n.is_dir()) throw Error(describe(n) + ": is a folder", EISDIR);
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) throw Error(describe(n) + ": read-only view", kChangeErrno);
  auto built = content(n, who);
  std::lock_guard<std::mutex> lock(growth_->mu);
  auto& readers = growth_->readers;
  std::pair<uid_t, int> reader{who.uid, who.pid};
  constexpr size_t kMaxReaders = 4096;  // a long mount sees many processes: the rest count as pid 0
  if (readers.size() >= kMaxReaders && !readers.count(reader)) reader.second = 0;
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

std::shared_ptr<const pt::VirtualFile> View::content(const Inode& n, const Caller& who) const {
  if (!n.is_file() || !n.file().build) throw Error("not a file", EISDIR);
  const FileData& f = n.file();
  if (f.build_for) return std::make_shared<const pt::VirtualFile>(f.build_for(who));
  if (f.live) return std::make_shared<const pt::VirtualFile>(f.build());  // never cached: it follows SRC
  return built_.get(n.ino, [&] {
    auto built = std::make_shared<const pt::VirtualFile>(f.build());
    const uint64_t known = f.size.load(std::memory_order_relaxed);
    if (known == Inode::kUnknown)
      f.size.store(built->size(), std::memory_order_relaxed);
    else if (known != built->size())  // thrown to every reader waiting, and not kept
      throw Error(describe(n) + ": size changed from " + std::to_string(known) + " to " + std::to_string(built->size()),
                  EIO);
    return built;
  });
}

std::string View::describe(const Inode& n) const {
  std::vector<const std::string*> names;  // nearest first: joined once, at any depth
  for (const Inode* p = &n; p && p->ino != Tree::kRoot; p = tree_.get(p->parent)) names.push_back(&p->name);
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path += "/" + **it;
  return path.empty() ? "/" : path;
}

const View::Folder* View::folder_of(const Inode& dir) const {
  std::vector<uint64_t> up;  // the folder and those above it, read before Growth::mu is taken
  for (const Inode* n = &dir; n; n = n->ino == Tree::kRoot ? nullptr : tree_.get(n->parent)) up.push_back(n->ino);
  std::lock_guard<std::mutex> lock(growth_->mu);
  for (uint64_t ino : up)
    if (auto it = growth_->folders.find(ino); it != growth_->folders.end()) return it->second.get();
  return nullptr;
}

bool View::refresh(const Inode& dir) const {
  const Folder* f = folder_of(dir);
  return f && f->refresh();
}

}  // namespace zm::view
