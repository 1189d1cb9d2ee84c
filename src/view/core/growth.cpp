// A View after its load: what is saved into its folders later, each `latest` following its
// source, tags deleted by a keep-last-N cleanup, and the live texts of .zeromount/
// (docs/ARCHITECTURE.md, "Growth").
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "growth.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/source_dir.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/file.h"
#include "zeromount/pt/text.h"
#include "zeromount/view/memo.h"
#include "zeromount/view/provider.h"

namespace zm::view {

std::string fingerprint(const std::string& dir) {
  std::vector<std::string> items;
  const ds::Dir d = ds::open_dir(dir);
  std::error_code ec;
  for (const ds::Dir::Entry& e : d.ok() ? d.list(ec) : std::vector<ds::Dir::Entry>{}) {
    struct stat st {};
    if (!d.stat(e.name, st)) continue;
    items.push_back(e.name + " " + std::to_string(st.st_size) + " " + std::to_string(pt::mtime_ns(st)));
  }
  std::sort(items.begin(), items.end());
  std::string fp;
  for (const auto& i : items) fp += i + "\n";
  return fp;
}

void View::Folder::refuse(const std::string& tag, const std::string& reason, std::string folder_fingerprint) const {
  attempts_[tag] = std::move(folder_fingerprint);
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(errors, [&](const TagError& e) { return e.tag == tag; });
  errors.push_back({tag, reason});
}

void View::Folder::serve(const std::string& tag) const {
  attempts_.erase(tag);
  std::lock_guard<std::mutex> lock(mu);
  served.insert(tag);
  std::erase_if(errors, [&](const TagError& e) { return e.tag == tag; });
}

void View::Folder::lose(const std::string& tag) const {
  std::lock_guard<std::mutex> lock(mu);
  served.erase(tag);
  lost.insert(tag);  // counted in stats (tags_deleted), not a line of errors: a keep-last-N run
                     // deletes a checkpoint at every save, and errors would grow without bound
}

bool View::Folder::is_tag(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu);
  return known.count(name) > 0;
}

void View::Folder::refuse_entry(const std::string& entry, const std::string& reason) const {
  constexpr size_t kMax = 256;  // anyone may look up any number of refused names
  std::lock_guard<std::mutex> lock(mu);
  if (refused_entries.size() < kMax) refused_entries.emplace(entry, reason);
}

bool View::Folder::is_served(const std::string& tag) const {
  std::lock_guard<std::mutex> lock(mu);
  return served.count(tag) > 0;
}

std::optional<std::string> View::Folder::latest_tag() const {
  std::lock_guard<std::mutex> lock(mu);
  return shown_tag_ && served.count(*shown_tag_) ? shown_tag_ : std::nullopt;
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

namespace {

// How long a request waits for a network source's rescan, or its read of `latest`, before it
// answers with what is known: a backend that answers lists within it, so a new tag is seen by the
// request that asked, as on a local disk; one that is gone holds the work below for a minute.
constexpr std::chrono::milliseconds kNetworkWait{500};

// Runs `work` for a request: here on a local source; on a network source on the View's rescan
// thread, waiting kNetworkWait at most, once at a time (`posted`): a request that finds one on its
// way goes on with what is known, and what it finds is there for the next. True if `work` ran
// here or finished in time and said true.
bool off_path(OffPath* rescans, std::atomic<bool>& posted, std::function<bool()> work) {
  if (!rescans) return work();
  if (posted.exchange(true)) return false;
  auto said = std::make_shared<bool>(false);
  return rescans->run(
             [&posted, said, work = std::move(work)] {
               struct Done {
                 std::atomic<bool>& posted;
                 ~Done() { posted = false; }
               } done{posted};
               *said = work();
             },
             kNetworkWait, OffPath::Unwaited::Keep) &&
         *said;
}

}  // namespace

bool View::Folder::refresh() const {
  const ViewOptions& o = view.opts_;
  if (o.rescan_seconds <= 0 || !own_tag.empty() || !o.tags.empty() || real == o.mount_point) return false;
  return off_path(view.rescans_.get(), rescan_posted_, [this] { return rescan(); });
}

bool View::Folder::rescan() const {
  const ViewOptions& o = view.opts_;
  {
    std::unique_lock scanning(scan_mu, std::try_to_lock);
    if (!scanning) return false;  // another request is rescanning; it adds what is new
    const auto now = Clock::now();
    if (now - last_scan_ < std::chrono::duration<double>(o.rescan_seconds)) return false;
    last_scan_ = now;
  }
  // Listed outside scan_mu, which listings of what is served take (served_tags): a slow source
  // holds up this rescan only. last_scan_ keeps a second one from starting meanwhile.
  ds::CheckpointDir dir;
  std::string error;
  try {
    dir = ds::scan_folder(real, o.mount_point);
  } catch (const Error& e) {
    error = e.what();
  }
  std::unique_lock scanning(scan_mu);
  if (!error.empty()) {
    if (scan_error_ != error) spdlog::warn("rescan: {}", error);  // once, not every second
    scan_error_ = error;
    return false;
  }
  scan_error_.clear();
  for (const auto& [name, why] : dir.refused) refuse_entry(name, why);
  forget_deleted(dir.tags);
  const size_t before = tags.size();
  index_new_tags(dir.tags, true);
  std::vector<const MountedTag*> added;
  for (size_t k = before; k < tags.size(); ++k) added.push_back(tags[k].get());
  Tree& tree = view.tree_;
  const size_t nodes = tree.size();
  // Listed before the tree's lock is taken: on a network source whose backend is gone the listing
  // waits on it, and lookups and listings of what is known must not (issue 40).
  const RealListing listing = list_real(real, o.mount_point);
  tree.append([&](Tree&) {
    mirror(view, this, listing, node);  // new real entries: a Trainer's checkpoint-N/, trainer_state.json
    show_partial_tags(dir.tags);
  });
  show_tags(added);
  if (new_run_folder()) tree.append([&](Tree& t) { add_run(t); });  // its first checkpoint-N/
  return !added.empty() || tree.size() != nodes;
}

void View::Folder::forget_deleted(const std::vector<std::string>& present) const {
  std::vector<const MountedTag*> gone;
  for (const auto& t : tags)
    if (is_served(t->index->tag) && std::find(present.begin(), present.end(), t->index->tag) == present.end())
      gone.push_back(t.get());
  // Folders below that were deleted with what they hold (a Trainer's checkpoint-N/).
  Growth& g = *view.growth_;
  std::vector<const Folder*> below;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    for (const auto& [ino, b] : g.folders)
      if (b->parent == node) below.push_back(b.get());
  }
  std::erase_if(below, [](const Folder* b) { return ds::is_folder(b->real); });
  for (const Folder* b : below) {
    // Its tags are read under its scan lock; a folder being rescanned now is seen to next time.
    std::unique_lock<std::mutex> scanning(b->scan_mu, std::try_to_lock);
    if (scanning) b->forget_deleted({});
  }
  if (gone.empty()) return;
  view.tree_.append([&](Tree& tree) {
    ProviderContext cx = context(tree, false);
    for (const MountedTag* t : gone) {
      lose(t->index->tag);
      spdlog::info("{}: deleted from the source; no longer served", inside(t->index->tag));
      for (const auto& p : providers()) p->drop_tag(cx, *t);
    }
  });
  std::lock_guard<std::mutex> lock(g.mu);
  g.tags_deleted += gone.size();
}

std::optional<std::string> View::Folder::take_latest(const std::optional<std::string>& text) const {
  const std::string named = ds::latest_tag(text.value_or(""));
  std::lock_guard<std::mutex> lock(mu);
  const bool first = !std::exchange(latest_taken_, true);
  if (text && served.count(named)) {
    shown_latest_ = *text;
    shown_tag_ = named;
    latest_note.clear();
  } else if (first) {
    shown_latest_ = text.value_or("");
    if (text && !served.empty()) {  // show the newest tag served, never one that is not
      const std::string newest = *std::max_element(served.begin(), served.end(), ds::tag_order);
      latest_note =
          "names " + pt::quoted(named) + ", which is not served; showing " + newest + ", the newest tag served";
      shown_latest_ = newest;
      shown_tag_ = newest;
    } else if (text) {
      latest_note = "names " + pt::quoted(named) + ", which is not served";
    }
  }
  return text ? std::optional(named) : std::nullopt;
}

std::optional<std::string> View::Folder::follow_latest() const {
  if (!own_tag.empty()) return own_tag;
  const ViewOptions& o = view.opts_;
  if (!o.network_source) return take_latest(ds::read_latest(real));
  // On a network source every read of SRC/latest is a request: the text read is kept for the rescan
  // period, and read again off the request path, the first time included (the request that asks
  // after the mount may come during an outage: read here, it waited for the backend's own
  // timeout). A backend gone leaves `latest` as it was last read.
  const auto at = Clock::now();
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    fresh = read_latest_ && at - read_latest_at_ < std::chrono::duration<double>(o.rescan_seconds);
  }
  const auto read = [this, at] {
    auto text = ds::read_latest(real);
    std::lock_guard<std::mutex> lock(mu);
    read_latest_ = std::move(text);
    read_latest_at_ = at;
    return true;
  };
  if (!fresh) off_path(view.rescans_.get(), latest_posted_, read);
  std::optional<std::string> now;
  {
    std::lock_guard<std::mutex> lock(mu);
    now = read_latest_;
  }
  return take_latest(now);
}

std::string View::Folder::latest_text() const {
  if (!own_tag.empty()) return own_tag;
  // A latest naming a tag not served yet: the save that rewrote it has most likely just finished.
  if (const auto tag = follow_latest(); tag && !is_served(*tag) && refresh()) follow_latest();
  std::lock_guard<std::mutex> lock(mu);
  return shown_latest_;
}

std::vector<NamedTag> View::Folder::served_tags() const {
  refresh();
  const bool network = view.opts_.network_source;
  std::vector<NamedTag> out;
  const auto own = [&](const Folder& g, const std::string& prefix) {
    std::lock_guard<std::mutex> scanning(g.scan_mu);  // what is indexed is appended under it
    // A tag folder deleted since the last rescan (a keep-last-N cleanup) is left out at once; on a
    // network source, where that look is a request per tag, at the next rescan.
    for (const auto& t : g.tags)
      if (g.is_served(t->index->tag) && (network || ds::is_folder(t->index->dir)))
        out.push_back({prefix + t->index->tag, t.get()});
  };
  own(*this, "");
  if (out.empty() && run) {
    const Tree& tree = view.tree_;
    const Inode& dir = *tree.get(node);
    for (uint64_t k = 0; const Inode* n = tree.listed_child(dir, k); ++k) {
      if (!n->is_dir() || n->folder().real.empty() || n->folder().plain || n->made_by) continue;
      view.fill(*n);
      const Folder* below = nullptr;
      {
        std::lock_guard<std::mutex> lock(view.growth_->mu);
        if (auto it = view.growth_->folders.find(n->ino); it != view.growth_->folders.end()) below = it->second.get();
      }
      if (!below) continue;
      below->refresh();
      own(*below, n->name + "/");
    }
  }
  std::sort(out.begin(), out.end(), [](const NamedTag& a, const NamedTag& b) { return ds::tag_order(a.path, b.path); });
  return out;
}

bool View::may_list(const Caller& who, uint64_t dir, const std::string& name) const {
  // A name never made (a made-up folder refused): whoever may list its folder may know why.
  const Inode* n = tree_.lookup(dir, name);
  if (!n) n = tree_.get(dir);
  if (!who.may(access(*n), n->is_dir() ? 0555 : 0444)) return false;
  if (n->ino == Tree::kRoot) return true;
  for (const Inode* p = tree_.get(n->parent);; p = tree_.get(p->parent)) {  // every folder on the way
    if (!who.may(access(*p), 0111)) return false;
    if (p->ino == Tree::kRoot) return true;
  }
}

// One entry, one line: names and reasons may hold newlines and bytes no terminal should get.
static std::string one_line(const std::string& line) {
  std::string out;
  for (size_t k = 0; k + 1 < line.size(); ++k) {
    const auto c = static_cast<unsigned char>(line[k]);
    if (c >= 0x20 && c != 0x7f) {
      out += char(c);
    } else {
      char buf[8];
      snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + "\n";
}

std::string View::errors_text(const Caller& who) const {
  std::vector<const Folder*> folders;
  {
    std::lock_guard<std::mutex> lock(growth_->mu);
    folders = growth_->order;
  }
  // Reasons name files by their path in the mount, never by where SRC is.
  const auto inside = [&](const std::string& reason) { return relative_to(root_, reason); };
  std::string text;
  for (const Folder* f : folders) {
    std::vector<std::pair<std::string, std::string>> lines;  // (entry it is about, line)
    {
      std::lock_guard<std::mutex> lock(f->mu);
      for (const auto& e : f->errors) lines.emplace_back(e.tag, f->inside(e.tag) + ": " + inside(e.reason) + "\n");
      if (!f->latest_note.empty()) lines.emplace_back("latest", f->inside("latest") + ": " + f->latest_note + "\n");
      for (const auto& [entry, reason] : f->refused_entries)  // seen by those who may read its folder
        lines.emplace_back(entry.substr(0, entry.find('/')), f->inside(entry) + ": " + inside(reason) + "\n");
    }
    for (const auto& [entry, line] : lines)
      if (may_list(who, f->node, entry)) text += one_line(line);
  }
  return text;
}

namespace {

// The daemon's resident memory now and at its highest (the kernel's VmRSS and VmHWM): a lookup's
// transient peak shows here even after the memory is given back.
uint64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  const size_t n = strlen(key);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') return std::stoull(line.substr(n + 1));
  return 0;
}
uint64_t rss_bytes() {
  return status_kib("VmRSS") << 10;
}
uint64_t peak_rss_bytes() {
  return status_kib("VmHWM") << 10;
}

}  // namespace

std::string View::stats_text(const Caller& who) const {
  const Growth& g = *growth_;
  size_t served = 0, refused = 0;
  std::vector<const Folder*> folders;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    folders = g.order;
  }
  for (const Folder* f : folders) {
    std::lock_guard<std::mutex> lock(f->mu);
    served += f->served.size();
    refused += size_t(
        std::count_if(f->errors.begin(), f->errors.end(), [&](const TagError& e) { return !f->lost.count(e.tag); }));
  }
  // The tree and the built-file cache (a Memo::mu_) are read before Growth::mu (growth.h).
  const size_t inodes = tree_.size();
  const uint64_t files_evicted_in_use = built_.evicted_in_use();
  std::lock_guard<std::mutex> lock(g.mu);
  uint64_t requests = 0;
  for (const auto& [reader, c] : g.readers) requests += c->requests.load(std::memory_order_relaxed);
  std::string s = "tags_served " + std::to_string(served) + "\ntags_refused " + std::to_string(refused) +
                  "\ntags_after_mount " + std::to_string(g.tags_after_mount) + "\ntags_deleted " +
                  std::to_string(g.tags_deleted) + "\nbytes_from_shards " + std::to_string(files_.bytes_read()) +
                  "\nsource_timeouts " + std::to_string(files_.timeouts()) + "\nrequests " + std::to_string(requests) +
                  "\ninodes " + std::to_string(inodes) + "\nplans_kept " +
                  std::to_string(plan_weight().entries.load(std::memory_order_relaxed)) + "\nplan_bytes " +
                  std::to_string(plan_weight().bytes.load(std::memory_order_relaxed)) + "\nplans_evicted_in_use " +
                  std::to_string(plan_weight().evicted_in_use.load(std::memory_order_relaxed)) +
                  "\nfiles_evicted_in_use " + std::to_string(files_evicted_in_use) + "\nrss_bytes " +
                  std::to_string(rss_bytes()) + "\npeak_rss_bytes " + std::to_string(peak_rss_bytes()) + "\n";
  for (const auto& [reader, c] : g.readers)  // another user's processes are theirs to know
    if (const uint64_t bytes = c->bytes.load(std::memory_order_relaxed);
        bytes && (who.uid == 0 || reader.first == who.uid))
      s += "pid " + std::to_string(reader.second) + " bytes " + std::to_string(bytes) + "\n";
  return s;
}

}  // namespace zm::view
