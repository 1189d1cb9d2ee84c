// A View after its load: tags saved into SRC later, `latest` following the source, and the live
// texts of .zeromount/ (docs/ARCHITECTURE.md, "Growth").
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "growth.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/file.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace fs = std::filesystem;

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

void View::Growth::refuse(const std::string& tag, const std::string& reason, std::string folder_fingerprint) {
  attempts[tag] = std::move(folder_fingerprint);  // attempts: load, then scan_mu
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(errors, [&](const TagError& e) { return e.tag == tag; });
  errors.push_back({tag, reason});
}

void View::Growth::serve(const std::string& tag) {
  attempts.erase(tag);
  std::lock_guard<std::mutex> lock(mu);
  served.insert(tag);
  std::erase_if(errors, [&](const TagError& e) { return e.tag == tag; });
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
    ProviderContext cx(tree, files_, opts_, *this, false);
    if (!tree.lookup(Tree::kRoot, "latest") && ds::read_latest(root_))  // the first save into an empty folder
      add_latest(cx, tree.get(Tree::kRoot)->mtime);
    follow_latest();
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
      {
        std::lock_guard<std::mutex> lock(g.mu);
        ++g.tags_after_mount;
      }
      spdlog::info("{}: indexed after the mount, now served ({} parameters)", tag, t.index->params.size());
      added = true;
    } catch (const Error& e) {
      // Most often a save still in progress: tried again once the folder changes.
      spdlog::info("{}: not served yet: {}", tag, e.what());
      g.refuse(tag, e.what(), std::move(fp));
    }
  }
  return added;
}

std::optional<std::string> View::follow_latest() const {
  const std::optional<std::string> now = ds::read_latest(root_);
  if (!now) return std::nullopt;
  const std::string tag = ds::latest_tag(*now);
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
    if (const uint64_t bytes = c->bytes.load(std::memory_order_relaxed))
      s += "pid " + std::to_string(pid) + " bytes " + std::to_string(bytes) + "\n";
  return s;
}

}  // namespace zm::view
