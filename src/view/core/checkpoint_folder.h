#pragma once
// What a View learns and changes while mounted (docs/SEMANTICS.md, "A live checkpoint folder"):
// the real folders it has filled, the tags each serves (appended only), what each `latest` shows,
// the refused and deleted tags, the read counters. Private to view/core: view.cpp (the load and the
// policy), fill.cpp (making a real folder's entries), checkpoint_folder.cpp (a checkpoint folder's
// fill and everything after) and status.cpp (the texts of .zeromount/).
//
// Lock order (as EdenFS's InodeLocks.md writes it down): a thread takes these only downward, never
// one above a lock it holds. Each line says what may be taken while holding it.
//   Growth::fill_mu    one fill at a time (View::fill). Under it: the new folder's scan_mu (before
//                      anyone else sees the folder), then what scan_mu allows.
//   Folder::scan_mu    one rescan or fill of a folder (Folder::refresh, Folder::fill): scanning,
//                      indexing, appending. Under it: a folder below's scan_mu by try_lock only
//                      (forget_deleted), Tree::mu_ (exclusive: Tree::append), Growth::mu, Folder::mu,
//                      the leaves, and what indexing takes (the index cache's files; no view lock).
//   LazyDir::prepare   before a lookup takes Tree::mu_, holding no lock of the tree: makes the plans
//                      make() needs (Memo::mu_, then the plan's own work: FileTable), so that a
//                      first layouts/<target> lookup stalls no other lookup or listing.
//                      Provider::prepare_tag does the same, before the append that shows a tag
//                      indexed after the mount, for the layouts/ targets made so far.
//   Tree::mu_          the tree: shared for lookups, exclusive for appends and LazyDir::make (the
//                      holding thread's own lookups do not lock again). Under it, exclusive:
//                      Folder::mu (is_tag, refuse_entry, take_latest), Growth::mu, the leaves; a plan
//                      evicted since it was prepared is made again here. Never fill_mu or scan_mu: a
//                      lookup rescans (View::refresh) before it locks the tree.
//   Growth::mu         the folder map, counters, readers. Under it: Folder::mu in stats_text and
//                      errors_text (one at a time), nothing else (folder_of reads the tree first).
//   Folder::mu         a folder's tag sets, errors and `latest`. Under it: nothing.
//   Memo::mu_ (View::built_, the plans), FileTable::table_mu_ then FileTable::mu_, ds::open_dir's
//                      cache: leaves (a Memo's is let go before its value is computed, a build
//                      taking what it takes outside it; the folder cache's before a folder is opened),
//                      and layout_files.cpp's shared_source (a tag's skeleton: a decode under it).
// tests/unit/live_test.cpp's LiveFolderConcurrency cases run rescans during listings and lookups,
// and deep_test.cpp's DeepConcurrency fills a deep chain from many threads, under ThreadSanitizer
// in CI.
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "zeromount/ds/source_dir.h"
#include "zeromount/view/view.h"

namespace zm::view {

using Clock = std::chrono::steady_clock;

struct RealEntry {
  std::string name, path;
  struct stat st {};
};

// A real folder's entries, sorted by name, and the folder opened: every look at an entry is
// relative to it, so a folder costs the same at any depth. `skip` (the mount point) is never
// looked into. Listed before Tree::append where the source may be slow (fill.cpp).
struct RealListing {
  ds::Dir dir;
  std::vector<RealEntry> entries;
};
RealListing list_real(const std::string& dir, const std::string& skip);

// A filled real folder of SRC that is not a tag folder. Once it holds a served tag it is a
// checkpoint folder: providers put their made-up entries beside its tags. It fills, rescans and
// follows its own source through the View it belongs to (the tree, the file table, the options,
// the folder map: `view`), which outlives it.
//
// Its reads are const, as CheckpointFolder's are to providers, but a read follows the source (a
// rescan, `latest` followed): what it learns is `mutable`, each member under the lock named.
class View::Folder final : public CheckpointFolder {
 public:
  Folder(const View& view, uint64_t node, std::string real, std::string rel, uint64_t parent)
      : view(view), node(node), real(std::move(real)), rel(std::move(rel)), parent(parent) {}

  const View& view;
  const uint64_t node;
  const std::string real;  // absolute
  const std::string rel;   // inside the mount: "" for SRC, else "run/checkpoint-2"
  const uint64_t parent;   // the folder record above, by inode; 0 for the root
  std::string own_tag;     // SRC is itself a tag folder: its name (set before the folder is shared)

  // CheckpointFolder.
  uint64_t ino() const override { return node; }
  const std::string& path() const override { return real; }
  std::string mount_path() const override { return "/" + rel; }
  std::string latest_text() const override;
  std::vector<NamedTag> served_tags() const override;
  std::optional<std::string> latest_tag() const override;
  bool is_tag(const std::string& name) const override;
  void refuse_entry(const std::string& entry, const std::string& reason) const override;

  // View::mirror with the real folder listed already (fill.cpp; `f`: nullptr for a folder that is
  // not a checkpoint folder): under Tree::append, with the listing made before it was taken.
  static void mirror(const View& view, const Folder* f, const RealListing& listing, uint64_t dir);
  // Its first fill (fill.cpp), under Growth::fill_mu, once the View has published it: indexes the
  // tags `scan` found, then shows its real entries and every provider's entries beside the tags.
  void fill(const ds::CheckpointDir& scan) const;
  // View::refresh for this folder: at most once per rescan period, never waiting for
  // another thread's rescan (on a network source, waiting a moment only: it runs off the request
  // path). True if anything was added.
  bool refresh() const;
  bool is_served(const std::string& tag) const;
  // Its `latest`: a live file showing latest_text() (under Tree::append; View::mirror).
  uint64_t add_latest(Tree& tree, struct timespec mtime) const;
  // The tag's path inside the mount, as errors name it.
  std::string inside(const std::string& tag) const { return rel.empty() ? tag : rel + "/" + tag; }

  // For .zeromount/errors, under its lock: (the entry a line is about, the line) for its refused
  // tags, `latest`'s note and its refused made-up entries; `inside` names a reason's files as the
  // mount shows them.
  std::vector<std::pair<std::string, std::string>> error_lines(
      const std::function<std::string(const std::string&)>& inside) const;
  // For .zeromount/stats, under its lock: the tags it serves, and those refused (not lost ones).
  std::pair<size_t, size_t> tag_counts() const;
  // The tags it indexed, in order (at the load's end, for the mount's counters: no rescan yet).
  std::vector<const MountedTag*> indexed_tags() const;
  // Held by View::fill from before the folder is published until its fill ends: a rescan waits.
  std::unique_lock<std::mutex> hold_scans() const { return std::unique_lock<std::mutex>(scan_mu); }

 private:
  // Appended under scan_mu (or at the fill, before anyone else sees the folder); never removed.
  mutable std::vector<std::unique_ptr<ds::TagIndex>> indexes;
  mutable std::vector<std::unique_ptr<MountedTag>> tags;
  mutable bool built = false;  // providers have made this folder's entries (it had a served tag)
  mutable bool run = false;    // no tags of its own, checkpoint folders below: providers made its run entries
  mutable std::mutex scan_mu;  // one rescan (or the fill) of this folder at a time

  mutable std::mutex mu;  // everything below
  mutable std::set<std::string> served;
  mutable std::set<std::string> known;  // every tag folder seen, served or not
  mutable std::set<std::string> lost;   // served, then deleted from the source: never served again
  mutable std::vector<TagError> errors;
  mutable std::string latest_note;  // why `latest` does not show the source's text, if it does not
  // Made-up entries not served, and why (refuse_entry).
  mutable std::map<std::string, std::string> refused_entries;

  // A network source's rescan or read of `latest` on its way on the View's rescan thread.
  mutable std::atomic<bool> rescan_posted_{false}, latest_posted_{false};
  // Under scan_mu.
  mutable Clock::time_point last_scan_;
  mutable std::string scan_error_;                       // why the last rescan failed, logged once
  mutable std::map<std::string, std::string> attempts_;  // tag -> fingerprint of its folder when it last failed
  // Under mu.
  mutable bool latest_taken_ = false;             // take_latest has run once (the fill)
  mutable std::string shown_latest_;              // what `latest` shows
  mutable std::optional<std::string> shown_tag_;  // the tag it names, once that tag is served
  // A network source's `latest` is read at most every rescan period: the last text read, and when.
  mutable std::optional<std::string> read_latest_;
  mutable Clock::time_point read_latest_at_;

  // refresh's work: lists the source and shows what is new (under scan_mu, but for the listing).
  bool rescan() const;
  // Indexes one tag folder and registers its shards; throws zm::Error when it cannot be indexed.
  const MountedTag& add_tag(const std::string& tag, bool* cache_hit) const;
  // Indexes the tags that are not served, each once per change of its folder. True if any was added.
  bool index_new_tags(const std::vector<std::string>& tags, bool after_mount) const;
  // Tag folders that do not index (yet): their real files, new ones included, in growing folders
  // (under Tree::append).
  void show_partial_tags(const std::vector<std::string>& tags) const;
  // Shows tags indexed after the fill: their real folder, then every provider's entries.
  void show_tags(const std::vector<const MountedTag*>& tags) const;
  // Served tags (here and in the folders below) whose folder is gone: lost (see lose).
  void forget_deleted(const std::vector<std::string>& present) const;
  // What `latest` shows, given the source's text (nothing: no `latest` DeepSpeed wrote): the text
  // while it names a served tag. The first time (the fill), a text naming no served tag shows the
  // newest served tag instead, with a note; later, the last text that named one stays (a save in
  // progress is never named). Returns the tag the text names.
  std::optional<std::string> take_latest(const std::optional<std::string>& text) const;
  // Reads the source's `latest` (on a network source, at most once per rescan period) and takes it.
  std::optional<std::string> follow_latest() const;
  // Whether, holding no tags, it is a run folder not shown as one yet (lists folders: call it
  // outside Tree::append).
  bool new_run_folder() const;
  // Shows it as a run folder: every provider's run entries (under Tree::append).
  void add_run(Tree& tree) const;
  ProviderContext context(Tree& tree, bool building) const;
  // Why `tag` is not served (an earlier reason for it replaced), and the folder listing that
  // failed, so that it is tried again only once the folder changes (under scan_mu).
  void refuse(const std::string& tag, const std::string& reason, std::string folder_fingerprint) const;
  // `tag` indexed: served, and off the error list (under scan_mu).
  void serve(const std::string& tag) const;
  // `tag`, served before, is gone from the source: no longer served, counted in stats.
  void lose(const std::string& tag) const;
};

struct View::Growth {
  std::mutex fill_mu;                                   // one fill at a time
  mutable std::mutex mu;                                // everything below
  std::map<uint64_t, std::unique_ptr<Folder>> folders;  // by the inode of the real folder
  std::vector<const Folder*> order;                     // in the order they were filled
  size_t tags_after_mount = 0, tags_deleted = 0, cache_hits = 0;
  // When View::load ended (wall clock, as file times are): a checkpoint folder made after it (a
  // Trainer's new checkpoint-N/) holds tags saved after the mount, though it is filled as new.
  struct timespec loaded_at {};
  std::map<std::pair<uid_t, int>, std::unique_ptr<ReaderCount>> readers;  // by opening user and process
};

// What a save in progress changes in a tag folder: its names, sizes and times.
std::string fingerprint(const std::string& dir);

}  // namespace zm::view
