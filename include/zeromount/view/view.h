#pragma once
// The whole mounted view of one checkpoint folder: the real tree, read-only and byte-identical,
// plus the made-up folders of every registered Provider. Every filesystem answer (names,
// attributes, open flags, directory offsets, statfs) is decided here, so it is unit-tested
// without FUSE; the adapter in src/fuse only translates to libfuse.
#include <sys/stat.h>

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/view/file_table.h"
#include "zeromount/view/mounted_tag.h"
#include "zeromount/view/open_file.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/tree.h"

namespace zm::view {

// The largest read or write request the mount asks the kernel for; also each file's st_blksize,
// which coreutils and Python size their reads by. 1 MiB requests beat 128 KiB ones by ~30% here.
inline constexpr uint32_t kRequestBytes = 1u << 20;

struct ViewOptions {
  bool bare_zero3_tensors = false;          // stage-3 sources: param files as bare tensors (DeepSpeed < 0.19.3)
  size_t cache_bytes = 16u << 20;           // built headers kept in memory; tensor bytes are never cached
  std::vector<std::string> layout_presets;  // -o layouts=a,b: targets listed in layouts/ (spec §6)
  std::string layouts_dir = "layouts";      // -o layouts_dir=NAME: where the faked layouts live
  std::vector<std::string> tags;            // --tag: serve only these (each must index); empty: every tag
  bool tp_strict = true;  // refuse unused universal_checkpoint_info patterns (ds_to_universal --no_strict: false)
  // -o rescan=S: at most this often, a lookup or listing that may concern a new tag rescans the
  // source for tags saved after the mount; 0 serves the mount-time tags only.
  double rescan_seconds = 1.0;
  bool crc = false;  // -o crc: real CRC-32s in made-up .pt files (stat and open then read the tensors)
};

struct MountStats {
  size_t refused_tags = 0;
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
  // Scans and indexes `source`. A tag that cannot be indexed is left out (see TagError); throws
  // zm::Error naming the file (and parameter) when a --tag cannot be indexed.
  static std::unique_ptr<View> load(const std::string& source, const ViewOptions& opts = {});
  ~View() override;

  const Tree& tree() const { return tree_; }
  const MountStats& stats() const { return stats_; }
  const FileTable& files() const { return files_; }

  // nullptr when the name does not exist (a negative entry, cacheable for negative_seconds). In
  // a growing folder a miss first rescans SRC (refresh).
  const Inode* lookup(uint64_t parent, std::string_view name) const;
  // Throws ENOENT for an inode the view never handed out.
  const Inode& inode(uint64_t ino) const;
  // Who may read `n`: a real entry's source owner and bits without write bits; a made-up one's
  // from the top-level made-up folder above it (never more than what it is built from).
  Access access(const Inode& n) const;
  // Attributes as the kernel sees them: source-following owners and modes, no write bits, exact sizes.
  struct stat attr(const Inode& n) const;
  // How long the kernel may keep names and attributes: a name, once handed out, keeps its meaning.
  double cache_seconds() const { return 365.0 * 86400; }
  // ... except a live file's attributes (its size follows the source) ...
  double attr_seconds(const Inode& n) const { return n.live ? 0 : cache_seconds(); }
  // ... and a growing folder's missing names, which a tag saved after the mount may fill.
  double negative_seconds(const Inode& parent) const { return parent.growing ? opts_.rescan_seconds : cache_seconds(); }
  // Whether attr(n) costs nothing now: a folder, a link, a live text, or a file whose size is known
  // or has a Sizer. A listing sends attributes only for those, so that `ls` of a folder of
  // thousands of unbuilt files (a faked layout's rank files) builds none of them.
  bool attr_ready(const Inode& n) const {
    return n.dir || !n.link.empty() || n.live || n.sizer || n.size.load(std::memory_order_relaxed) != Inode::kUnknown;
  }
  // Whether the kernel may keep a folder's listing.
  bool listing_cached(const Inode& dir) const { return !dir.growing; }
  // Whether reads of an open file bypass the page cache: live files change between opens.
  bool direct_io(const Inode& n) const { return n.live; }
  // ENOTDIR unless `n` is a folder.
  void open_dir(const Inode& n) const;
  // The entry at `offset` of folder `dir`, or nothing past the end.
  std::optional<DirEntry> dir_entry(const Inode& dir, uint64_t offset) const;
  // EISDIR for a folder; EROFS for any write access mode or O_TRUNC; otherwise the file, built.
  // `reader`: the opening process, whose reads .zeromount/stats counts.
  OpenFile open(const Inode& n, int flags, int reader = 0) const;
  // Adds the tags saved in SRC since the mount that now index cleanly (at most once per
  // rescan_seconds; never waits for a rescan another thread is doing). True if any was added.
  bool refresh() const;

  // LiveSource: what the live files show.
  std::string latest_text() const override;
  std::optional<std::string> latest_tag() const override;
  std::string errors_text() const override;
  std::string stats_text() const override;
  FsStats statfs() const;
  // A symbolic link's target; EINVAL for anything else.
  std::string readlink(const Inode& n) const;
  // The errno of every operation that would change the tree (write, create, unlink, setattr, ...).
  static constexpr int kChangeErrno = EROFS;

  // The bytes of a file, built on first use and kept in a bounded cache.
  std::shared_ptr<const pt::VirtualFile> content(const Inode& n) const;
  std::string describe(const Inode& n) const;  // path inside the mount, for log lines

 private:
  struct Growth;
  View(const ViewOptions& opts, struct timespec mtime);
  // Mirrors SRC's folder `real_dir` into `dir`, adding only names `dir` does not have yet.
  void mirror(const std::string& real_dir, uint64_t dir) const;
  // Indexes one tag folder and registers its shards; throws zm::Error when it cannot be indexed.
  const MountedTag& add_tag(const std::string& tag_dir, bool* cache_hit = nullptr) const;
  // Shows a tag indexed after the mount: its real folder, then every provider's folders.
  void show_new_tag(const std::string& tag_dir, const MountedTag& tag) const;
  bool served(const std::string& tag) const;
  // The top-level `latest`: a live file showing latest_text().
  uint64_t add_latest(ProviderContext& cx, struct timespec mtime) const;
  // Takes SRC's `latest` if it names a served tag; returns the tag it names, served or not.
  std::optional<std::string> follow_latest() const;

  ViewOptions opts_;
  // Both only grow after the load (refresh), each under its own lock: the View stays logically const.
  mutable Tree tree_;
  mutable FileTable files_;
  MountStats stats_;
  std::string root_;      // SRC, absolute
  std::string root_tag_;  // SRC's name when SRC is itself a tag folder, else empty
  mutable std::atomic<uint64_t> real_bytes_{0};
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  // What changes while mounted: the tags (appended only), latest, errors, read counters.
  std::unique_ptr<Growth> growth_;

  // LRU of built files, by inode, bounded by cache_bytes.
  mutable std::mutex cache_mu_;
  mutable std::list<std::pair<uint64_t, std::shared_ptr<const pt::VirtualFile>>> lru_;
  mutable std::unordered_map<uint64_t, decltype(lru_)::iterator> cached_;
  mutable size_t cached_bytes_ = 0;
};

}  // namespace zm::view
