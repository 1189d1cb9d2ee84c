#pragma once
// The whole mounted view of one checkpoint folder: the real tree, read-only and byte-identical,
// plus the made-up folders of every registered Provider. Every filesystem answer (names,
// attributes, open flags, directory offsets, statfs) is decided here, so it is unit-tested
// without FUSE; the adapter in src/fuse only translates to libfuse.
#include <sys/stat.h>

#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/view/file_table.h"
#include "zeromount/view/memo.h"
#include "zeromount/view/mounted_tag.h"
#include "zeromount/view/off_path.h"
#include "zeromount/view/open_file.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/tree.h"
#include "zeromount/view/view_options.h"

namespace zm::view {

// The largest read or write request the mount asks the kernel for; also each file's st_blksize,
// which coreutils and Python size their reads by. 1 MiB requests beat 128 KiB ones by ~30% here.
inline constexpr uint32_t kRequestBytes = 1u << 20;
// How many entries made on demand (layouts/ targets and their rank files) the kernel may keep
// before the oldest are invalidated: about 1 KiB each with what they hold (bench/names.py).
inline constexpr size_t kMadeKept = 4096;

struct MountStats {
  size_t refused_tags = 0;
  size_t folders = 0;  // real folders in SRC that are not tags: they may hold checkpoints, indexed on first use
  size_t tags = 0, params = 0, files = 0, nodes = 0, shards = 0, cache_hits = 0;
  uint64_t state_bytes = 0;
  double index_seconds = 0;
};

// One entry of a directory listing. Offsets: 0 is ".", 1 is "..", 2 + k is the k-th child;
// `next` is the offset to resume from, as readdir(3) expects.
struct DirEntry {
  std::string_view name;
  const Inode* node;
  uint64_t next;
};

struct FsStats {
  uint32_t block_size = 4096;
  uint64_t blocks = 0;  // the real files' bytes, in blocks: what the mount occupies
  uint64_t files = 0, files_free = 0;
  uint32_t name_max = 255;
};

class View final : public LiveSource {
 public:
  // Scans `source` and indexes the tags it holds (those of folders below it are indexed when the
  // folder is first used). A tag that cannot be indexed is left out (see TagError); throws
  // zm::Error naming the file (and parameter) when a --tag cannot be indexed.
  static std::unique_ptr<View> load(const std::string& source, const ViewOptions& opts = {});
  ~View() override;
  // Once, by the server, before its first request (after the daemon forked): reads of a network
  // source get their deadline (-o source_timeout) and its rescans their thread (OffPath).
  void start_serving() const;

  const Tree& tree() const { return tree_; }
  const MountStats& stats() const { return stats_; }
  const FileTable& files() const { return files_; }

  // nullptr when the name does not exist (a negative entry, cacheable for negative_seconds). In
  // a growing folder a miss first rescans its real folder (refresh).
  // `ref`: the answer goes to the kernel, which takes a reference to it (forget gives it back).
  const Inode* lookup(uint64_t parent, std::string_view name, bool ref = false) const;
  // The kernel dropped `count` references (taken by lookup and dir_entry with `ref`): what a LazyDir
  // made (a layouts/ target, its rank files) is dropped once nothing refers to it and nothing of it
  // is open (Tree::forget).
  void forget(uint64_t ino, uint64_t count) const { tree_.forget(ino, count); }
  // Made-on-demand entries beyond the newest kMadeKept, as (folder, name): the adapter asks the
  // kernel to let go of them, so that the daemon's memory is bounded whatever anyone looks up.
  std::vector<std::pair<uint64_t, std::string>> surplus() const { return tree_.surplus(kMadeKept); }
  // Throws ENOENT for an inode the view never handed out (or has forgotten).
  const Inode& inode(uint64_t ino) const;
  // Who may read `n`: a real entry's source owner and bits without write bits; a made-up one's
  // from the top-level made-up folder above it (never more than what it is built from).
  Access access(const Inode& n) const;
  // Attributes as the kernel sees them: source-following owners and modes, no write bits, exact sizes.
  // `who`: a live file's size is that of what `who` would read.
  struct stat attr(const Inode& n, const Caller& who = {}) const;
  // How long the kernel may keep names and attributes: a name, once handed out, keeps its meaning.
  double cache_seconds() const { return 365.0 * 86400; }
  // ... except a live file's attributes (its size follows the source) ...
  double attr_seconds(const Inode& n) const { return n.is_live() ? 0 : cache_seconds(); }
  // ... and a growing folder's missing names, which a tag saved after the mount may fill.
  double negative_seconds(const Inode& parent) const {
    return parent.is_dir() && parent.folder().growing ? opts_.rescan_seconds : cache_seconds();
  }
  // Whether attr(n) costs nothing now: a folder, a link, a live text, or a file whose size is known
  // or has a Sizer that reads no folder (FileData::costly_sizer). A listing sends attributes only for those, so that
  // `ls` of a folder of thousands of unbuilt files (a faked layout's rank files) builds none of them.
  bool attr_ready(const Inode& n) const {
    if (!n.is_file()) return true;
    const FileData& f = n.file();
    if (f.costly_sizer) return false;
    return f.live || f.sizer || f.size.load(std::memory_order_relaxed) != Inode::kUnknown;
  }
  // Whether the kernel may keep a folder's listing.
  bool listing_cached(const Inode& dir) const { return !dir.folder().growing; }
  // Whether reads of an open file bypass the page cache: live files change between opens.
  bool direct_io(const Inode& n) const { return n.is_live(); }
  // ENOTDIR unless `n` is a folder.
  void open_dir(const Inode& n) const;
  // The entry at `offset` of folder `dir`, or nothing past the end.
  // `ref`: as for lookup, for every entry but . and .. (readdirplus).
  std::optional<DirEntry> dir_entry(const Inode& dir, uint64_t offset, bool ref = false) const;
  // EISDIR for a folder; EROFS for any write access mode or O_TRUNC; otherwise the file, built.
  // `who`: the opening process, whose reads .zeromount/stats counts, and what it may see.
  OpenFile open(const Inode& n, int flags, const Caller& who = {}) const;
  // Shows what was saved into the real folder of growing folder `dir` (or of the checkpoint folder
  // above it) since its last scan: new entries, and new tags once they index cleanly; forgets
  // deleted tags. At most once per rescan_seconds per folder; never waits for a rescan another
  // thread is doing. True if anything was added.
  bool refresh(const Inode& dir) const;

  // LiveSource: what the live files of .zeromount/ show to `who`.
  std::string errors_text(const Caller& who = {}) const override;
  std::string stats_text(const Caller& who = {}) const override;
  FsStats statfs() const;
  // A symbolic link's target; EINVAL for anything else.
  std::string readlink(const Inode& n) const;
  // The errno of every operation that would change the tree (write, create, unlink, setattr, ...).
  static constexpr int kChangeErrno = EROFS;

  // The bytes of a file, built on first use and kept in a bounded cache.
  std::shared_ptr<const pt::VirtualFile> content(const Inode& n, const Caller& who = {}) const;
  // Built files the cache dropped while a reader still held them or their build still ran
  // (.zeromount/stats: files_evicted_in_use).
  uint64_t files_evicted_in_use() const { return built_.evicted_in_use(); }
  std::string describe(const Inode& n) const;  // path inside the mount, for log lines

 private:
  struct Growth;
  class Folder;  // a checkpoint folder: fills, rescans and follows its source (checkpoint_folder.h)
  View(const ViewOptions& opts, struct timespec mtime);
  // Makes the entries of real folder `dir` if they are not made yet: its real entries and, for a
  // folder that holds tags, their index and every provider's entries (fill.cpp).
  // `scanned`: the folder's scan when the caller has just made it (SRC at load).
  void fill(const Inode& dir, const ds::CheckpointDir* scanned = nullptr) const;
  // The entries of `folder`'s real folder that `dir` does not show yet; tag folders are plain.
  void mirror(const Folder* folder, const std::string& real_dir, uint64_t dir) const;
  // The folder record of `dir`, or of the nearest real folder above it; nullptr for none.
  const Folder* folder_of(const Inode& dir) const;
  // Whether a sub-folder of real folder `dir` is a checkpoint folder: then `dir`, holding no tags
  // itself, is a run folder (Provider::add_run). Lists `dir`'s sub-folders and theirs.
  bool holds_checkpoint_folders(const std::string& dir) const;
  // Whether `who` may read entry `name` of folder `dir` and search every folder above it.
  bool may_list(const Caller& who, uint64_t dir, const std::string& name) const;

  ViewOptions opts_;
  // Both only grow after the load (refresh), each under its own lock: the View stays logically const.
  mutable Tree tree_;
  mutable FileTable files_;
  MountStats stats_;
  std::string root_;  // SRC, absolute
  mutable std::atomic<uint64_t> real_bytes_{0};
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  // What changes while mounted: the folders and their tags (appended only), latest, errors, read counters.
  std::unique_ptr<Growth> growth_;

  // The DCP folders' plans (ProviderContext::dcp_plans): the View's own, as its tags are.
  std::shared_ptr<const DcpPlans> dcp_plans_ = make_dcp_plans();
  // Built files by inode, the least recently used dropped beyond cache_bytes (what their headers and
  // segment tables hold); readers of one file at once wait for one build.
  mutable Memo<uint64_t, pt::VirtualFile, std::numeric_limits<size_t>::max()> built_;
  // A network source's rescans, off the request path (checkpoint_folder.cpp), made by start_serving; last, so
  // that its thread is joined before what it rescans goes.
  mutable std::unique_ptr<OffPath> rescans_;
};

}  // namespace zm::view
