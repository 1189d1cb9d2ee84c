#pragma once
// What a View learns and changes while mounted (docs/SEMANTICS.md, "A live checkpoint folder"):
// the real folders it has filled, the tags each serves (appended only), what each `latest` shows,
// the refused and deleted tags, the read counters. Private to view.cpp (the load and the policy),
// fill.cpp (making a real folder's entries) and growth.cpp (everything after).
//
// Lock order (as EdenFS's InodeLocks.md writes it down): a thread takes these only downward, never
// one above a lock it holds. Each line says what may be taken while holding it.
//   Growth::fill_mu      one fill at a time. Under it: Folder::scan_mu, Tree::mu_ (append),
//                        Growth::mu, Folder::mu.
//   Folder::scan_mu      one rescan (or fill) of a folder: indexing, then appending. Under it:
//                        Tree::mu_ (exclusive, Tree::append), Growth::mu, Folder::mu, and what
//                        indexing takes (the index cache's files; no view lock).
//   Tree::mu_            the tree (shared for lookups, exclusive for appends and LazyDir::make).
//                        Under it, exclusive: Folder::mu (is_tag, refuse_entry), Growth::mu,
//                        a LazyDir's plans (Memo::mu_, then the plan's own work: the shared
//                        source of layout_files.cpp, FileTable). Never scan_mu or fill_mu: a
//                        lookup does not rescan under the tree's lock (View::refresh runs first).
//   Growth::mu           the folder map, counters, readers. Under it: nothing but Folder::mu
//                        in stats_text/errors_text (one at a time).
//   Folder::mu           a folder's tag sets and latest. A leaf.
//   View::cache_mu_, FileTable::table_mu_ then FileTable::mu_, Memo::mu_: leaves (Memo's is let
//                        go before its value is computed).
// tests/unit/view_test.cpp's Concurrency cases run rescans, listings and lookups at once under
// ThreadSanitizer in CI.
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "zeromount/view/view.h"

namespace zm::view {

using Clock = std::chrono::steady_clock;

// A filled real folder of SRC that is not a tag folder. Once it holds a served tag it is a
// checkpoint folder: providers put their made-up entries beside its tags.
struct View::Folder final : CheckpointFolder {
  const View* view = nullptr;
  uint64_t node = 0;
  std::string real;     // absolute
  std::string rel;      // inside the mount: "" for SRC, else "run/checkpoint-2"
  std::string own_tag;  // SRC is itself a tag folder: its name (shown inside the root)
  uint64_t parent = 0;  // the folder record above, by inode; 0 for the root

  // Appended under scan_mu (or at the fill, before anyone else sees the folder); never removed.
  std::vector<std::unique_ptr<ds::TagIndex>> indexes;
  std::vector<std::unique_ptr<MountedTag>> tags;
  bool built = false;  // providers have made this folder's entries (it had a served tag)
  bool run = false;    // no tags of its own, checkpoint folders below: providers made its run entries
  std::mutex scan_mu;  // one rescan of this folder at a time
  Clock::time_point last_scan;
  std::string scan_error;                       // why the last rescan failed, logged once
  std::map<std::string, std::string> attempts;  // tag -> fingerprint of its folder when it last failed

  mutable std::mutex mu;  // everything below
  std::set<std::string> served;
  std::set<std::string> known;  // every tag folder seen, served or not
  std::set<std::string> lost;   // served, then deleted from the source: never served again
  std::vector<TagError> errors;
  std::string shown_latest;              // what `latest` shows
  std::optional<std::string> shown_tag;  // the tag it names, once that tag is served
  std::string latest_note;               // why `latest` does not show the source's text, if it does not
  // A network source's `latest` is read at most every rescan period: the last text read, and when.
  std::optional<std::string> read_latest;
  Clock::time_point read_latest_at;
  // Made-up entries not served, and why (refuse_entry): written by providers through a const
  // CheckpointFolder, so mutable, under mu like the rest.
  mutable std::map<std::string, std::string> refused_entries;

  uint64_t ino() const override { return node; }
  const std::string& path() const override { return real; }
  std::string mount_path() const override { return "/" + rel; }
  // The View updates what a folder shows as it is asked (a rescan, `latest` followed): the
  // CheckpointFolder interface is const to providers, the record itself is the View's to change.
  std::string latest_text() const override { return view->latest_text(const_cast<Folder&>(*this)); }
  std::vector<NamedTag> served_tags() const override { return view->served_tags(const_cast<Folder&>(*this)); }
  std::optional<std::string> latest_tag() const override;
  bool is_tag(const std::string& name) const override;
  bool is_served(const std::string& tag) const;
  void refuse_entry(const std::string& entry, const std::string& reason) const override;
  // The tag's path inside the mount, as errors name it.
  std::string inside(const std::string& tag) const { return rel.empty() ? tag : rel + "/" + tag; }
  // Why `tag` is not served (an earlier reason for it replaced), and the folder listing that
  // failed, so that it is tried again only once the folder changes.
  void refuse(const std::string& tag, const std::string& reason, std::string folder_fingerprint);
  // `tag` indexed: served, and off the error list.
  void serve(const std::string& tag);
  // `tag`, served before, is gone from the source: no longer served, one line in errors.
  void lose(const std::string& tag);
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
