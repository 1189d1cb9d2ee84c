#pragma once
// What changes in a View while mounted (a live checkpoint folder, docs/SEMANTICS.md): the tags,
// appended only; `latest` as the view shows it; the refused tags; the read counters. Private to
// view.cpp (the load) and growth.cpp (everything after it).
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

  // Why `tag` is not served (an earlier reason for it replaced), and the folder listing that
  // failed, so that it is tried again only once the folder changes.
  void refuse(const std::string& tag, const std::string& reason, std::string folder_fingerprint);
  // `tag` indexed: served, and off the error list.
  void serve(const std::string& tag);
};

// What a save in progress changes in a tag folder: its names, sizes and times.
std::string fingerprint(const std::string& dir);

}  // namespace zm::view
